//! The shapes a router level matches outright. Most levels of a large router hold one shape
//! (with 100k `col = const` shapes, 100k levels of one each), so one is kept inline and only
//! two or more take a hash set.

use super::hash::FxHashSet;
use super::ShapeId;

/// A set of shape ids that allocates only from its second member on.
#[derive(Default)]
pub(crate) enum ShapeSet {
    /// No shape.
    #[default]
    Empty,
    /// One shape, inline.
    One(ShapeId),
    /// Two or more shapes.
    Many(Box<FxHashSet<ShapeId>>),
}

impl ShapeSet {
    /// Adds `shape` (no change if it is there).
    pub(crate) fn insert(&mut self, shape: ShapeId) {
        match self {
            ShapeSet::Empty => *self = ShapeSet::One(shape),
            ShapeSet::One(one) if *one == shape => {}
            ShapeSet::One(one) => {
                let set: FxHashSet<ShapeId> = [*one, shape].into_iter().collect();
                *self = ShapeSet::Many(Box::new(set));
            }
            ShapeSet::Many(set) => {
                set.insert(shape);
            }
        }
    }

    /// Removes `shape` (no change if it is not there). A set left with one member keeps it
    /// inline again.
    pub(crate) fn remove(&mut self, shape: ShapeId) {
        match self {
            ShapeSet::One(one) if *one == shape => *self = ShapeSet::Empty,
            ShapeSet::Empty | ShapeSet::One(_) => {}
            ShapeSet::Many(set) => {
                set.remove(&shape);
                if set.len() == 1 {
                    let last = set.iter().next().copied();
                    *self = last.map_or(ShapeSet::Empty, ShapeSet::One);
                }
            }
        }
    }

    /// Whether the set has no member.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, ShapeSet::Empty)
    }

    /// Adds every member to `out`.
    pub(crate) fn add_to(&self, out: &mut FxHashSet<ShapeId>) {
        match self {
            ShapeSet::Empty => {}
            ShapeSet::One(one) => {
                out.insert(*one);
            }
            ShapeSet::Many(set) => out.extend(set.iter().copied()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(set: &ShapeSet) -> Vec<ShapeId> {
        let mut out = FxHashSet::default();
        set.add_to(&mut out);
        let mut v: Vec<_> = out.into_iter().collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn holds_what_a_hash_set_holds_and_goes_back_inline() {
        let mut set = ShapeSet::default();
        assert!(set.is_empty());
        set.insert(7);
        set.insert(7);
        assert!(matches!(set, ShapeSet::One(7)));
        set.insert(3);
        set.insert(9);
        assert_eq!(members(&set), vec![3, 7, 9]);
        set.remove(7);
        set.remove(42);
        assert_eq!(members(&set), vec![3, 9]);
        set.remove(3);
        assert!(matches!(set, ShapeSet::One(9)));
        set.remove(1);
        assert!(matches!(set, ShapeSet::One(9)));
        set.remove(9);
        assert!(set.is_empty());
        assert_eq!(members(&set), Vec::<ShapeId>::new());
    }
}
