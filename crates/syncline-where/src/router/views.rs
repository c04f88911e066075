//! Each shape's value sets, as the router keeps them: the tuples the caller says the shape's
//! view of each subquery holds, and where each subquery occurrence the index answers is
//! attached.

use super::hash::FxHashSet;
use super::plan::Access;
use super::ShapeId;
use crate::error::EvalError;
use crate::eval::Membership;
use crate::expr::Expr;
use crate::subquery::normal_texts;
use crate::types::Type;
use crate::value::Nullable;

/// A subquery occurrence the index answers: reached from the root through the accesses of
/// `path`, true when the row's `cols` are in the shape's set of `subquery`, the shape then
/// matching when `rest` holds too.
pub(crate) struct Attachment {
    /// The subquery.
    pub(crate) subquery: usize,
    /// The accesses from the root to the node the entries go in.
    pub(crate) path: Vec<Access>,
    /// The left-side columns.
    pub(crate) cols: Vec<usize>,
    /// What else must hold.
    pub(crate) rest: Option<Expr>,
}

/// An indexed tuple's owner: a shape and which of its attachments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ViewEntry {
    /// The shape.
    pub(crate) shape: ShapeId,
    /// Index into its [`ShapeViews::attachments`].
    pub(crate) attachment: usize,
}

/// One subquery's value set for one shape.
pub(crate) struct SubView {
    /// The select-list types (for normalizing the caller's texts).
    pub(crate) types: Vec<Option<Type>>,
    /// Normal texts of the tuples the set holds (the caller cannot pass a tuple with NULL).
    pub(crate) set: FxHashSet<Vec<String>>,
    /// Whether every occurrence of the subquery is reached through AND and OR only, where a
    /// miss may be taken as false (a set holding a NULL would make it NULL: the same for
    /// whether the clause is true).
    pub(crate) monotone: bool,
}

/// A shape's value sets and subquery attachments.
pub(crate) struct ShapeViews {
    /// Per subquery of the shape's clause.
    pub(crate) subs: Vec<SubView>,
    /// Every indexed occurrence.
    pub(crate) attachments: Vec<Attachment>,
}

impl ShapeViews {
    /// Empty sets for a clause with `subqueries` of these select-list types.
    pub(crate) fn new(
        expr: &Expr,
        types: Vec<Vec<Option<Type>>>,
        attachments: Vec<Attachment>,
    ) -> ShapeViews {
        let mut monotone = vec![true; types.len()];
        mark_monotone(expr, &mut monotone);
        ShapeViews {
            subs: types
                .into_iter()
                .zip(monotone)
                .map(|(types, monotone)| SubView {
                    types,
                    set: FxHashSet::default(),
                    monotone,
                })
                .collect(),
            attachments,
        }
    }
}

/// Clears the flag of every subquery with an occurrence under anything but AND and OR.
fn mark_monotone(expr: &Expr, flags: &mut [bool]) {
    match expr {
        Expr::And(args) | Expr::Or(args) => args.iter().for_each(|a| mark_monotone(a, flags)),
        Expr::Sublink { .. } => {}
        other => {
            let mut children = Vec::new();
            other.visit(&mut |e| {
                if let Expr::Sublink { subquery, .. } = e {
                    children.push(*subquery);
                }
            });
            for subquery in children {
                if let Some(flag) = flags.get_mut(subquery) {
                    *flag = false;
                }
            }
        }
    }
}

/// Membership from the router's sets. A tuple in the set is certainly true. A miss is false
/// where the occurrence is monotone; elsewhere it may be NULL (a set holding a NULL, which the
/// router is never told of) or false, so it is unknown: an error, which routing counts as a
/// possible match.
impl Membership for ShapeViews {
    fn member(
        &self,
        subquery: usize,
        left: &[Nullable],
        types: &[Type],
    ) -> Result<Option<bool>, EvalError> {
        let Some(sub) = self.subs.get(subquery) else {
            return Err(EvalError::Other("unknown subquery".into()));
        };
        let texts: Option<Vec<String>> = normal_texts(left, types).into_iter().collect();
        if texts.is_some_and(|t| sub.set.contains(&t)) {
            return Ok(Some(true));
        }
        if sub.monotone {
            return Ok(Some(false));
        }
        Err(EvalError::Other(
            "whether the value set holds a NULL is not known".into(),
        ))
    }

    /// An empty set is false only where false and NULL are alike: it may hold NULLs.
    fn is_empty(&self, subquery: usize) -> bool {
        self.subs
            .get(subquery)
            .is_some_and(|sub| sub.monotone && sub.set.is_empty())
    }
}
