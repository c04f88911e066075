//! Range index: which ranges contain a value, in time that grows with the answer, not with the
//! number of ranges.
//!
//! Ranges sorted by lower bound carry a segment tree of the greatest upper bound; a stabbing
//! query binary-searches the ranges that start at or before the value and descends only into
//! subtrees whose greatest upper bound reaches it. Ranges added since the last build wait in a
//! small unsorted list, scanned on each query, until there are more than
//! `pending_max = 64 + sqrt(n)` of them; then the structure is rebuilt (amortised cost per add
//! O(sqrt(n) log n)).

use std::cmp::Ordering;
use std::collections::HashMap;

use super::key::Key;
use super::plan::Bound;
use crate::value::Datum;

/// Pending ranges allowed before a rebuild, beyond the square root of the total.
const PENDING_BASE_MAX: usize = 64;

/// Ranges on one column, each with a payload.
pub(crate) struct RangeIndex<T> {
    entries: Vec<Entry<T>>,
    by_bounds: HashMap<(BoundKey, BoundKey), usize>,
    sorted: Vec<usize>,
    tree: Vec<usize>,
    pending: Vec<usize>,
    live: usize,
}

struct Entry<T> {
    lo: Bound,
    hi: Bound,
    payload: Option<T>,
}

type BoundKey = (u8, Option<Key>);

fn bound_key(b: &Bound) -> BoundKey {
    match b {
        Bound::Unbounded => (0, None),
        Bound::Incl(v) => (1, Key::of(v)),
        Bound::Excl(v) => (2, Key::of(v)),
    }
}

/// Orders lower bounds (`lower`) or upper bounds by how much they admit.
fn cmp_bound(a: &Bound, b: &Bound, lower: bool) -> Ordering {
    let unbounded = if lower {
        Ordering::Less
    } else {
        Ordering::Greater
    };
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => unbounded,
        (_, Bound::Unbounded) => unbounded.reverse(),
        (Bound::Incl(x) | Bound::Excl(x), Bound::Incl(y) | Bound::Excl(y)) => {
            x.compare(y).then_with(|| {
                let rank = |b: &Bound| matches!(b, Bound::Excl(_)) as u8;
                let o = rank(a).cmp(&rank(b));
                if lower {
                    o
                } else {
                    o.reverse()
                }
            })
        }
    }
}

fn lo_admits(lo: &Bound, v: &Datum) -> bool {
    match lo {
        Bound::Unbounded => true,
        Bound::Incl(a) => a.compare(v).is_le(),
        Bound::Excl(a) => a.compare(v).is_lt(),
    }
}

fn hi_admits(hi: &Bound, v: &Datum) -> bool {
    match hi {
        Bound::Unbounded => true,
        Bound::Incl(b) => v.compare(b).is_le(),
        Bound::Excl(b) => v.compare(b).is_lt(),
    }
}

impl<T> Default for RangeIndex<T> {
    fn default() -> Self {
        RangeIndex {
            entries: Vec::new(),
            by_bounds: HashMap::new(),
            sorted: Vec::new(),
            tree: Vec::new(),
            pending: Vec::new(),
            live: 0,
        }
    }
}

impl<T> RangeIndex<T> {
    /// The payload for a range, created with `make` if the range is new.
    pub(crate) fn entry(&mut self, lo: Bound, hi: Bound, make: impl FnOnce() -> T) -> &mut T {
        let key = (bound_key(&lo), bound_key(&hi));
        let i = match self.by_bounds.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.entries.len();
                self.entries.push(Entry {
                    lo,
                    hi,
                    payload: Some(make()),
                });
                self.by_bounds.insert(key.clone(), i);
                self.pending.push(i);
                self.live += 1;
                if self.pending.len() > PENDING_BASE_MAX + self.live.isqrt() {
                    self.rebuild();
                    return self
                        .get_mut_by_key(&key)
                        .expect("a rebuild keeps live ranges");
                }
                i
            }
        };
        self.entries[i]
            .payload
            .as_mut()
            .expect("indexed ranges keep their payload")
    }

    /// The payload for a range, if present.
    pub(crate) fn get_mut(&mut self, lo: &Bound, hi: &Bound) -> Option<&mut T> {
        self.get_mut_by_key(&(bound_key(lo), bound_key(hi)))
    }

    fn get_mut_by_key(&mut self, key: &(BoundKey, BoundKey)) -> Option<&mut T> {
        let i = *self.by_bounds.get(key)?;
        self.entries[i].payload.as_mut()
    }

    /// Drops a range and its payload.
    pub(crate) fn remove(&mut self, lo: &Bound, hi: &Bound) {
        if let Some(i) = self.by_bounds.remove(&(bound_key(lo), bound_key(hi))) {
            self.entries[i].payload = None;
            self.live -= 1;
            if self.live * 2 < self.entries.len() {
                self.rebuild();
            }
        }
    }

    /// Whether no range is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Payloads of all ranges.
    pub(crate) fn all(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.payload.as_ref())
    }

    /// Payloads of the ranges containing `v`.
    pub(crate) fn stab<'a>(&'a self, v: &Datum, out: &mut impl FnMut(&'a T)) {
        let count = self
            .sorted
            .partition_point(|&i| lo_admits(&self.entries[i].lo, v));
        if count > 0 {
            self.descend(1, 0, self.sorted.len(), count, v, out);
        }
        for &i in &self.pending {
            let e = &self.entries[i];
            if let Some(p) = &e.payload {
                if lo_admits(&e.lo, v) && hi_admits(&e.hi, v) {
                    out(p);
                }
            }
        }
    }

    fn descend<'a>(
        &'a self,
        node: usize,
        start: usize,
        end: usize,
        count: usize,
        v: &Datum,
        out: &mut impl FnMut(&'a T),
    ) {
        if start >= count || !hi_admits(&self.entries[self.tree[node]].hi, v) {
            return;
        }
        if end - start == 1 {
            if let Some(p) = &self.entries[self.sorted[start]].payload {
                out(p);
            }
            return;
        }
        let mid = (start + end) / 2;
        self.descend(2 * node, start, mid, count, v, out);
        self.descend(2 * node + 1, mid, end, count, v, out);
    }

    /// Compacts removed entries, sorts by lower bound and rebuilds the max-upper-bound tree.
    fn rebuild(&mut self) {
        let entries = std::mem::take(&mut self.entries);
        self.entries = entries
            .into_iter()
            .filter(|e| e.payload.is_some())
            .collect();
        self.entries.sort_by(|a, b| cmp_bound(&a.lo, &b.lo, true));
        self.by_bounds = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| ((bound_key(&e.lo), bound_key(&e.hi)), i))
            .collect();
        self.sorted = (0..self.entries.len()).collect();
        self.pending.clear();
        self.live = self.entries.len();
        self.tree = vec![0; 4 * self.sorted.len().max(1)];
        if !self.sorted.is_empty() {
            self.build(1, 0, self.sorted.len());
        }
    }

    fn build(&mut self, node: usize, start: usize, end: usize) -> usize {
        let best = if end - start == 1 {
            self.sorted[start]
        } else {
            let mid = (start + end) / 2;
            let (l, r) = (
                self.build(2 * node, start, mid),
                self.build(2 * node + 1, mid, end),
            );
            if cmp_bound(&self.entries[l].hi, &self.entries[r].hi, false).is_ge() {
                l
            } else {
                r
            }
        };
        self.tree[node] = best;
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stabs_exactly_the_containing_ranges() {
        let mut index: RangeIndex<u32> = RangeIndex::default();
        let int = |i: i64| Datum::Int(i);
        for i in 0..500i64 {
            *index.entry(
                Bound::Incl(int(i * 10)),
                Bound::Excl(int(i * 10 + 15)),
                || 0,
            ) = u32::try_from(i).unwrap();
        }
        *index.entry(Bound::Unbounded, Bound::Incl(int(3)), || 0) = 9999;
        index.remove(&Bound::Incl(int(100)), &Bound::Excl(int(115)));
        for v in [-1i64, 3, 4, 104, 105, 110, 4990, 5010] {
            let mut got = Vec::new();
            index.stab(&int(v), &mut |p| got.push(*p));
            got.sort();
            let mut want: Vec<u32> = (0..500i64)
                .filter(|i| i * 10 <= v && v < i * 10 + 15 && *i != 10)
                .map(|i| u32::try_from(i).unwrap())
                .collect();
            if v <= 3 {
                want.push(9999);
            }
            want.sort();
            assert_eq!(got, want, "value {v}");
        }
    }
}
