//! Results: the fixed summation order of TAPE-FORMAT.md (Results) and the report built from it.
//!
//! Every sum over paths is one balanced pairwise tree over aligned power-of-two blocks of path
//! indices, padded with -0.0:
//!
//! ```text
//! leaf p   = path p's leaf of the sum as f64 ([`output_leaves`]); -0.0 for p >= paths
//! S(a, 1)  = leaf a
//! S(a, 2m) = S(a, m) + S(a + m, m)            (f64, a a multiple of 2m)
//! sum      = S(0, R) for any power of two R >= paths
//! ```
//!
//! `x + -0.0` is `x` for every x (`-0.0` and NaN payloads included), so padding never changes a
//! bit and the root size does not matter: a block whose sibling is all padding is its own parent,
//! and a GPU workgroup that runs past the run's end (its lanes add `-0.0`) sums what the host would.
//! (With +0.0 padding an all-`-0.0` sum turned +0.0 depending on the root: a 1-path GPU run
//! disagreed with the CPU.)
//!
//! A run over any path range reports [`PartialSums`]: the sums of the maximal aligned blocks that tile
//! its range (TAPE-FORMAT.md asks for ranges whose ends are multiples of 1024 or the path count; any
//! range works here). `PartialSums` keeps blocks in a canonical form: two sibling blocks are always
//! combined into their parent, and a block whose sibling lies wholly at or past `paths` is combined
//! with that zero sibling. Every block's value is therefore `S(a, m)` of the single-run tree, and
//! merging partial results in any order or grouping rebuilds exactly the single run's bits.
//!
//! [`Report`] turns complete sums into the numbers a user reads:
//!
//! ```text
//! n      = paths - non_finite       (the paths used: a non-finite path adds 0 to every other sum)
//! value  = sum / n                  greek[i] = (sum of d output / d input i) / n
//! stderr = sqrt(max(0, (sumsq_c - n * (sum / n - c)^2) / (n - 1))) / sqrt(n)   (NaN for n < 2)
//! ```
//!
//! where `sumsq_c` is the sum of squares about the shift `c` (path 0's leaf, passed to the kernel
//! by the host; [`output_leaves`] says what each path adds to each sum). A Greek's standard error
//! is the same formula over its own sum, its sum of squares and its shift.
//!
//! Runtime backends use the same functions, so a report is the same bits whichever target summed it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why partial sums could not be built, merged or finished.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error("a run needs at least one path")]
    NoPaths,
    #[error("partial sums for {left} paths cannot merge with partial sums for {right} paths")]
    PathsMismatch { left: u64, right: u64 },
    #[error("block at path {start} of length 2^{log2_len} is not aligned to its length")]
    Misaligned { start: u64, log2_len: u32 },
    #[error("block at path {start} of length 2^{log2_len} lies outside the run's {paths} paths (tree root {root})")]
    OutOfRange {
        start: u64,
        log2_len: u32,
        paths: u64,
        root: u64,
    },
    #[error("block at path {start} of length 2^{log2_len} overlaps paths already summed")]
    Overlap { start: u64, log2_len: u32 },
    #[error("the sums cover {covered} of {paths} paths; the total needs all of them")]
    Incomplete { covered: u64, paths: u64 },
    #[error("partial sums whose squares were taken about different shifts cannot merge")]
    Shifts,
    #[error("{what}: expected {expected}, got {got}")]
    Shape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
}

/// The sum `S(start, 2^log2_len)` of one aligned block of the summation tree (what a run ships to
/// whoever merges: its blocks and the run's path count, rebuilt by `PartialSums::from_blocks`).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub start: u64,
    pub log2_len: u32,
    pub sum: f64,
}

impl Block {
    fn len(&self) -> u64 {
        1u64 << self.log2_len
    }
}

/// The fixed-order sum of `leaves` (leaf p at index p): `S(0, leaves.len().next_power_of_two())`, 0 if empty.
pub fn tree_sum(leaves: &[f64]) -> f64 {
    tree_sum_rows(&mut leaves.to_vec(), 1)[0]
}

/// [`tree_sum`] of every column of `rows`, a row-major table `width` values wide (a GPU's group
/// partials: row g holds group g's sums; a last partial row is ignored), computed in place on
/// whole rows, level by level: `S(a, 2m) = S(a, m) + S(a + m, m)`, a missing sibling at an odd
/// level padding (-0.0: the row is its own parent). `tree_sum` is the one-column case, so
/// every column has its bits. A long table is cut into aligned power-of-two runs of rows, each
/// a subtree of the same tree, summed on threads of their own; their roots are then summed
/// like any rows, so the thread count never changes a bit.
pub fn tree_sum_rows(rows: &mut [f64], width: usize) -> Vec<f64> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    tree_sum_rows_on(rows, width, threads.min(8), PARALLEL_ROWS)
}

/// Tables of fewer rows are summed on one thread (a thread start costs about what summing
/// 2^15 rows does).
const PARALLEL_ROWS: usize = 1 << 15;

fn tree_sum_rows_on(
    rows: &mut [f64],
    width: usize,
    threads: usize,
    parallel_rows: usize,
) -> Vec<f64> {
    if width == 0 {
        return Vec::new();
    }
    let n = rows.len() / width;
    if n == 0 {
        return vec![0.0; width];
    }
    let rows = &mut rows[..n * width];
    if threads > 1 && n >= parallel_rows {
        let run = n.div_ceil(threads).next_power_of_two();
        std::thread::scope(|s| {
            for part in rows.chunks_mut(run * width) {
                s.spawn(move || sum_rows_into_first(part, width));
            }
        });
        let mut roots: Vec<f64> = rows
            .chunks(run * width)
            .flat_map(|part| part[..width].iter().copied())
            .collect();
        sum_rows_into_first(&mut roots, width);
        return roots[..width].to_vec();
    }
    sum_rows_into_first(rows, width);
    rows[..width].to_vec()
}

/// Sums the rows of `rows` pairwise, level by level, into its first row.
fn sum_rows_into_first(rows: &mut [f64], width: usize) {
    let mut n = rows.len() / width;
    while n > 1 {
        let half = n / 2;
        for i in 0..half {
            let src = 2 * i * width;
            for c in 0..width {
                rows[i * width + c] = rows[src + c] + rows[src + width + c];
            }
        }
        if n % 2 == 1 {
            // The odd row's sibling is padding: `x + -0.0` is `x`.
            let src = (n - 1) * width;
            rows.copy_within(src..src + width, half * width);
        }
        n = n.div_ceil(2);
    }
}

/// Some aligned blocks of the summation tree of a run of `paths` paths, in canonical form.
#[derive(Clone, Debug, PartialEq)]
pub struct PartialSums {
    paths: u64,
    /// start -> (log2 length, sum); disjoint, canonical (no two siblings both present).
    blocks: BTreeMap<u64, (u32, f64)>,
}

impl PartialSums {
    /// No paths summed yet, for a run of `paths` paths (at least one).
    pub fn empty(paths: u64) -> Result<PartialSums, ReportError> {
        if paths == 0 {
            return Err(ReportError::NoPaths);
        }
        Ok(PartialSums {
            paths,
            blocks: BTreeMap::new(),
        })
    }

    /// The whole run's sums from equal aligned blocks that tile it from path 0: `blocks` blocks of
    /// `2^log2_len` paths, the first `blocks` starting below `paths` (what a GPU run's group
    /// partials are), whose `tree_sum` (or column of [`tree_sum_rows`]) is `total`. That is the
    /// bits inserting the blocks one by one gives (padding past the run is -0.0, which adds
    /// nothing), in O(blocks) adds and no map; fails unless the blocks tile the run.
    pub fn from_tiling_sum(
        paths: u64,
        log2_len: u32,
        blocks: u64,
        total: f64,
    ) -> Result<PartialSums, ReportError> {
        let mut out = PartialSums::empty(paths)?;
        let len = 1u64.checked_shl(log2_len).unwrap_or(0);
        let root = paths.next_power_of_two();
        if len == 0
            || len > root
            || blocks
                .checked_mul(len)
                .is_none_or(|end| end < paths || end - len >= paths)
        {
            return Err(ReportError::Incomplete {
                covered: blocks.saturating_mul(len).min(paths),
                paths,
            });
        }
        out.blocks.insert(0, (root.trailing_zeros(), total));
        Ok(out)
    }

    /// The sums of paths `start .. start + leaves.len()` of a run of `paths` paths (leaf p-start is path p).
    pub fn from_leaves(paths: u64, start: u64, leaves: &[f64]) -> Result<PartialSums, ReportError> {
        let mut out = [PartialSums::empty(paths)?];
        PartialSums::add_rows(&mut out, start, &mut leaves.to_vec())?;
        let [out] = out;
        Ok(out)
    }

    /// Adds the leaves of paths `start .. start + rows.len() / columns.len()` to `columns`, one
    /// `PartialSums` per column of the row-major table `rows` (row p is path `start + p`): the
    /// bits `from_leaves` of each column and `merge` give, without a column's copy or a clone.
    /// The range is tiled with maximal aligned blocks as `from_leaves` tiles it, and each block's
    /// rows are summed in place, all columns at once (so `rows` is left holding partial sums).
    /// Fails, changing nothing, on a range outside the run or one a column holds already.
    pub fn add_rows(
        columns: &mut [PartialSums],
        start: u64,
        rows: &mut [f64],
    ) -> Result<(), ReportError> {
        let width = columns.len();
        if width == 0 {
            return Ok(());
        }
        if !rows.len().is_multiple_of(width) {
            return Err(ReportError::Shape {
                what: "leaves in a table of rows",
                expected: rows.len() / width * width,
                got: rows.len(),
            });
        }
        let n = (rows.len() / width) as u64;
        for c in columns.iter() {
            let end =
                start
                    .checked_add(n)
                    .filter(|&e| e <= c.paths)
                    .ok_or(ReportError::OutOfRange {
                        start,
                        log2_len: 0,
                        paths: c.paths,
                        root: c.paths.next_power_of_two(),
                    })?;
            if n > 0 && c.holds_any(start, end) {
                return Err(ReportError::Overlap { start, log2_len: 0 });
            }
        }
        let end = start + n;
        let mut a = start;
        while a < end {
            let mut log2 = if a == 0 { 63 } else { a.trailing_zeros() };
            while log2 > 0 && (1u64 << log2) > end - a {
                log2 -= 1;
            }
            let len = 1usize << log2;
            let lo = (a - start) as usize * width;
            let block = &mut rows[lo..lo + len * width];
            sum_rows_into_first(block, width);
            for (c, &sum) in columns.iter_mut().zip(&block[..width]) {
                c.insert(Block {
                    start: a,
                    log2_len: log2,
                    sum,
                })?;
            }
            a += len as u64;
        }
        Ok(())
    }

    /// Partial sums from block sums a backend computed (each `S(start, 2^log2_len)` of the run's tree).
    pub fn from_blocks(paths: u64, blocks: &[Block]) -> Result<PartialSums, ReportError> {
        let mut out = PartialSums::empty(paths)?;
        if let Some(stack) = out.merge_ascending(blocks)? {
            out.blocks = stack
                .into_iter()
                .map(|b| (b.start, (b.log2_len, b.sum)))
                .collect();
            return Ok(out);
        }
        for b in blocks {
            out.insert(*b)?;
        }
        Ok(out)
    }

    /// `from_blocks` for blocks in ascending, disjoint order (what a GPU's group partials are):
    /// the same merges as inserting them one by one, in the same order and so with the same bits,
    /// on a stack instead of a map (O(1) amortized per block). `Ok(None)` when the blocks are not
    /// ascending and disjoint (the caller inserts them one by one).
    #[allow(clippy::assign_op_pattern)]
    fn merge_ascending(&self, blocks: &[Block]) -> Result<Option<Vec<Block>>, ReportError> {
        let root = self.paths.next_power_of_two();
        let mut stack: Vec<Block> = Vec::new();
        let mut next_free = 0u64;
        for b in blocks {
            self.check(b)?;
            if b.start < next_free {
                return Ok(None);
            }
            next_free = b.start + b.len();
            let mut top = *b;
            while top.len() < root {
                let m = top.len();
                if top.start % (2 * m) == 0 {
                    // A left child: only padding can be its right sibling yet. S(sib, m) of
                    // padding is -0.0, the identity, so the block is its own parent.
                    if top.start + m < self.paths {
                        break;
                    }
                } else {
                    match stack.last() {
                        Some(left)
                            if left.start + m == top.start && left.log2_len == top.log2_len =>
                        {
                            // S(a, 2m) = S(a, m) + S(a + m, m), written in tree order
                            top.sum = left.sum + top.sum;
                            top.start = left.start;
                            stack.pop();
                        }
                        _ => break,
                    }
                }
                top.log2_len += 1;
            }
            stack.push(top);
        }
        Ok(Some(stack))
    }

    /// A block's alignment and range (the checks `insert` makes before merging).
    fn check(&self, b: &Block) -> Result<(), ReportError> {
        let root = self.paths.next_power_of_two();
        if b.log2_len >= 64 || !b.start.is_multiple_of(1u64 << b.log2_len) {
            return Err(ReportError::Misaligned {
                start: b.start,
                log2_len: b.log2_len,
            });
        }
        if b.start >= self.paths || b.len() > root {
            return Err(ReportError::OutOfRange {
                start: b.start,
                log2_len: b.log2_len,
                paths: self.paths,
                root,
            });
        }
        Ok(())
    }

    /// Adds `other`'s paths; fails (leaving `self` unchanged) on a different run size or on overlap.
    pub fn merge(&mut self, other: &PartialSums) -> Result<(), ReportError> {
        if self.paths != other.paths {
            return Err(ReportError::PathsMismatch {
                left: self.paths,
                right: other.paths,
            });
        }
        let mut next = self.clone();
        for b in other.blocks() {
            next.insert(b)?;
        }
        *self = next;
        Ok(())
    }

    /// The run's path count.
    pub fn paths(&self) -> u64 {
        self.paths
    }

    /// The blocks held, by start; each is the single-run tree's `S(start, 2^log2_len)`.
    pub fn blocks(&self) -> Vec<Block> {
        self.blocks
            .iter()
            .map(|(&start, &(log2_len, sum))| Block {
                start,
                log2_len,
                sum,
            })
            .collect()
    }

    /// How many of the run's paths are summed.
    pub fn covered(&self) -> u64 {
        self.blocks()
            .iter()
            .map(|b| (b.start + b.len()).min(self.paths) - b.start)
            .sum()
    }

    /// The whole run's sum, bit-identical to `tree_sum` of all its leaves; fails until every path is in.
    pub fn total(&self) -> Result<f64, ReportError> {
        let root = self.paths.next_power_of_two();
        match self.blocks.get(&0) {
            Some(&(log2, sum)) if (1u64 << log2) == root => Ok(sum),
            _ => Err(ReportError::Incomplete {
                covered: self.covered(),
                paths: self.paths,
            }),
        }
    }

    /// Whether a held block meets paths `start .. end` (non-empty): the blocks are disjoint and
    /// ordered, so the last one starting before `end` is the only one that can reach `start`.
    fn holds_any(&self, start: u64, end: u64) -> bool {
        self.blocks
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &(l, _))| s + (1u64 << l) > start)
    }

    #[allow(clippy::assign_op_pattern)]
    fn insert(&mut self, b: Block) -> Result<(), ReportError> {
        let root = self.paths.next_power_of_two();
        self.check(&b)?;
        let (start, log2) = (b.start, b.log2_len);
        if self.holds_any(start, start + b.len()) {
            return Err(ReportError::Overlap {
                start,
                log2_len: log2,
            });
        }
        let (mut s, mut l, mut v) = (start, log2, b.sum);
        while (1u64 << l) < root {
            let m = 1u64 << l;
            if s % (2 * m) == 0 {
                let sib = s + m;
                // S(sib, m) of padding is -0.0, the identity: the block is its own parent.
                if sib < self.paths {
                    match self.blocks.get(&sib) {
                        Some(&(sl, x)) if sl == l => {
                            self.blocks.remove(&sib);
                            v += x;
                        }
                        _ => break,
                    }
                }
            } else {
                let sib = s - m;
                if self.blocks.get(&sib).is_some_and(|&(sl, _)| sl == l) {
                    let left = self.blocks.remove(&sib).map_or(0.0, |(_, x)| x);
                    v = left + v; // S(a, 2m) = S(a, m) + S(a + m, m), written in tree order
                    s = sib;
                } else {
                    break;
                }
            }
            l += 1;
        }
        self.blocks.insert(s, (l, v));
        Ok(())
    }
}

/// One output's leaves for one path, in `manifest::sum_names` order: what every kernel adds to
/// each sum (TAPE-FORMAT.md, Results). `value` and `greeks` are the path's output and its
/// derivatives as f64 (empty in price mode); `shifts` are the constants the squares are taken
/// about: the value's, then (when `greek_sq`) one per Greek.
///
/// ```text
/// finite path:     value, (value - c)^2, greek_i..., (greek_i - c_i)^2... (when greek_sq), 0
/// non-finite path: 0 for every leaf but the last, which is 1
/// ```
///
/// A path is non-finite for this output when its value or one of its Greeks is NaN or
/// infinite; its leaves are all left out (0) and it is counted instead.
pub fn output_leaves(value: f64, greeks: &[f64], shifts: &[f64], greek_sq: bool) -> Vec<f64> {
    let n = 3 + greeks.len() * if greek_sq { 2 } else { 1 };
    let mut out = Vec::with_capacity(n);
    if !value.is_finite() || greeks.iter().any(|g| !g.is_finite()) {
        out.resize(n - 1, 0.0);
        out.push(1.0);
        return out;
    }
    let sq = |x: f64, c: f64| {
        let d = x - c;
        d * d
    };
    out.push(value);
    out.push(sq(value, shifts.first().copied().unwrap_or(0.0)));
    out.extend_from_slice(greeks);
    if greek_sq {
        for (i, &g) in greeks.iter().enumerate() {
            out.push(sq(g, shifts.get(1 + i).copied().unwrap_or(0.0)));
        }
    }
    out.push(0.0);
    out
}

/// One output's shifts from path 0's value and Greeks (what a host passes, read from path 0's
/// leaves): the value, then when `greek_sq` each Greek; all 0 when path 0 is non-finite for
/// this output (its leaves are 0).
pub fn path_shifts(value: f64, greeks: &[f64], greek_sq: bool) -> Vec<f64> {
    let leaves = output_leaves(value, greeks, &[], false);
    let mut out = vec![leaves[0]];
    if greek_sq {
        out.extend_from_slice(&leaves[2..2 + greeks.len()]);
    }
    out
}

/// The fixed-order sums of one output over some paths (`manifest::sum_names`): its values, their
/// squares about `shifts[0]`, its derivative with respect to every input (in input order), their
/// squares about `shifts[1..]` (empty when the kernel does not sum them), and the count of
/// non-finite paths, which every other sum leaves out.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputSums {
    pub value: PartialSums,
    pub square: PartialSums,
    pub greeks: Vec<PartialSums>,
    pub greek_squares: Vec<PartialSums>,
    pub non_finite: PartialSums,
    /// The shifts the squares were taken about: the value's, then one per Greek square.
    pub shifts: Vec<f64>,
}

impl OutputSums {
    /// The sums over paths `start .. start + values.len()` of a run of `paths` paths; `derivs[i][p]`
    /// is path `start + p`'s derivative with respect to input i. Each path's leaves are
    /// [`output_leaves`] with `shifts` (one, or 1 + derivs.len() when `greek_sq`).
    pub fn from_leaves(
        paths: u64,
        start: u64,
        values: &[f64],
        derivs: &[Vec<f64>],
        shifts: &[f64],
        greek_sq: bool,
    ) -> Result<OutputSums, ReportError> {
        if let Some(d) = derivs.iter().find(|d| d.len() != values.len()) {
            return Err(ReportError::Shape {
                what: "derivative leaves per input",
                expected: values.len(),
                got: d.len(),
            });
        }
        let n_shifts = 1 + if greek_sq { derivs.len() } else { 0 };
        if shifts.len() != n_shifts {
            return Err(ReportError::Shape {
                what: "shifts",
                expected: n_shifts,
                got: shifts.len(),
            });
        }
        let width = 3 + derivs.len() * if greek_sq { 2 } else { 1 };
        let mut columns = vec![Vec::with_capacity(values.len()); width];
        let mut greeks = vec![0.0; derivs.len()];
        for (p, &v) in values.iter().enumerate() {
            for (g, d) in greeks.iter_mut().zip(derivs) {
                *g = d[p];
            }
            for (c, leaf) in columns
                .iter_mut()
                .zip(output_leaves(v, &greeks, shifts, greek_sq))
            {
                c.push(leaf);
            }
        }
        let mut sums = columns
            .iter()
            .map(|c| PartialSums::from_leaves(paths, start, c))
            .collect::<Result<Vec<_>, _>>()?;
        OutputSums::from_columns(&mut sums, derivs.len(), greek_sq, shifts.to_vec())
    }

    /// One output's sums from its columns in `manifest::sum_names` order (value, square,
    /// `n_greeks` Greeks, as many squares when `greek_sq`, non-finite), taken out of `columns`.
    pub fn from_columns(
        columns: &mut [PartialSums],
        n_greeks: usize,
        greek_sq: bool,
        shifts: Vec<f64>,
    ) -> Result<OutputSums, ReportError> {
        let n_sq = if greek_sq { n_greeks } else { 0 };
        let width = 3 + n_greeks + n_sq;
        if columns.len() != width {
            return Err(ReportError::Shape {
                what: "sums of one output",
                expected: width,
                got: columns.len(),
            });
        }
        if shifts.len() != 1 + n_sq {
            return Err(ReportError::Shape {
                what: "shifts",
                expected: 1 + n_sq,
                got: shifts.len(),
            });
        }
        let take = |c: &mut PartialSums| {
            let paths = c.paths();
            std::mem::replace(
                c,
                PartialSums {
                    paths,
                    blocks: BTreeMap::new(),
                },
            )
        };
        Ok(OutputSums {
            value: take(&mut columns[0]),
            square: take(&mut columns[1]),
            greeks: columns[2..2 + n_greeks].iter_mut().map(take).collect(),
            greek_squares: columns[2 + n_greeks..2 + n_greeks + n_sq]
                .iter_mut()
                .map(take)
                .collect(),
            non_finite: take(&mut columns[width - 1]),
            shifts,
        })
    }

    /// Adds `other`'s paths; fails (leaving `self` unchanged) on different shapes, shifts, runs
    /// or overlap.
    pub fn merge(&mut self, other: &OutputSums) -> Result<(), ReportError> {
        if self.greeks.len() != other.greeks.len()
            || self.greek_squares.len() != other.greek_squares.len()
        {
            return Err(ReportError::Shape {
                what: "greek sums to merge",
                expected: self.greeks.len() + self.greek_squares.len(),
                got: other.greeks.len() + other.greek_squares.len(),
            });
        }
        let bits = |s: &[f64]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if bits(&self.shifts) != bits(&other.shifts) {
            return Err(ReportError::Shifts);
        }
        let mut next = self.clone();
        next.value.merge(&other.value)?;
        next.square.merge(&other.square)?;
        for (a, b) in next.greeks.iter_mut().zip(&other.greeks) {
            a.merge(b)?;
        }
        for (a, b) in next.greek_squares.iter_mut().zip(&other.greek_squares) {
            a.merge(b)?;
        }
        next.non_finite.merge(&other.non_finite)?;
        *self = next;
        Ok(())
    }
}

/// One output's results. Every mean divides by the paths used, `paths - non_finite`; a
/// statistic that is undefined (no path used, or one for a standard error) is NaN, which JSON
/// prints as `null`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputReport {
    pub name: String,
    pub value: f64,
    pub stderr: f64,
    /// (input name, d value / d input), in input order.
    pub greeks: Vec<(String, f64)>,
    /// The standard error of each Greek, in input order; empty when the kernel does not sum the
    /// Greeks' squares (compiled without them, or price mode).
    pub greek_stderr: Vec<f64>,
    /// The paths whose value or one of its Greeks was NaN or infinite, left out of every sum.
    pub non_finite: u64,
}

/// The results of a run, one entry per output in output order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub outputs: Vec<OutputReport>,
}

/// The standard error of the mean over `n` paths from their sum and their sum of squares about
/// the shift `c`: the sample standard deviation (n - 1) / sqrt(n), with the sample variance
/// `(sum_sq - n (mean - c)^2) / (n - 1)` (clamped at 0), `mean = sum / n`. The squares about a
/// `c` near the mean (path 0's leaf) keep the cancellation small: an output of 1e8 + N(0,1)
/// keeps its variance, where `sum of x^2 - sum^2 / n` loses it all. NaN for fewer than 2 paths
/// (undefined) and whenever a sum is NaN.
pub fn standard_error(n: u64, sum: f64, sum_sq: f64, c: f64) -> f64 {
    if n < 2 {
        return f64::NAN;
    }
    let nf = n as f64;
    let d = sum / nf - c;
    let var = ((sum_sq - nf * d * d) / (nf - 1.0)).max(0.0);
    // max(NaN, 0) is 0 in Rust: keep a NaN variance NaN.
    let var = if sum.is_nan() || sum_sq.is_nan() {
        f64::NAN
    } else {
        var
    };
    var.sqrt() / nf.sqrt()
}

impl OutputReport {
    /// One output's results from its complete sums (`greek_sums` and `greek_sq_sums` in input
    /// order, paired with `inputs`; `greek_sq_sums` empty when not summed), the non-finite count
    /// and the shifts (the value's, then one per Greek square).
    #[allow(clippy::too_many_arguments)]
    pub fn from_totals(
        name: &str,
        paths: u64,
        non_finite: u64,
        sum: f64,
        sum_sq: f64,
        inputs: &[String],
        greek_sums: &[f64],
        greek_sq_sums: &[f64],
        shifts: &[f64],
    ) -> Result<OutputReport, ReportError> {
        if paths == 0 {
            return Err(ReportError::NoPaths);
        }
        if inputs.len() != greek_sums.len() {
            return Err(ReportError::Shape {
                what: "greek sums per input",
                expected: inputs.len(),
                got: greek_sums.len(),
            });
        }
        if !greek_sq_sums.is_empty() && greek_sq_sums.len() != greek_sums.len() {
            return Err(ReportError::Shape {
                what: "greek squares per input",
                expected: greek_sums.len(),
                got: greek_sq_sums.len(),
            });
        }
        if shifts.len() != 1 + greek_sq_sums.len() {
            return Err(ReportError::Shape {
                what: "shifts",
                expected: 1 + greek_sq_sums.len(),
                got: shifts.len(),
            });
        }
        let used = paths.saturating_sub(non_finite);
        let n = used as f64;
        Ok(OutputReport {
            name: name.to_string(),
            value: sum / n,
            stderr: standard_error(used, sum, sum_sq, shifts[0]),
            greeks: inputs
                .iter()
                .zip(greek_sums)
                .map(|(i, g)| (i.clone(), g / n))
                .collect(),
            greek_stderr: greek_sq_sums
                .iter()
                .zip(greek_sums)
                .zip(&shifts[1..])
                .map(|((&q, &g), &c)| standard_error(used, g, q, c))
                .collect(),
            non_finite,
        })
    }
}

impl Report {
    /// The report from every output's complete sums (`sums` in output order, parallel to `outputs`).
    pub fn from_sums(
        outputs: &[String],
        inputs: &[String],
        sums: &[OutputSums],
    ) -> Result<Report, ReportError> {
        if outputs.len() != sums.len() {
            return Err(ReportError::Shape {
                what: "output sums",
                expected: outputs.len(),
                got: sums.len(),
            });
        }
        let totals = |ps: &[PartialSums]| -> Result<Vec<f64>, ReportError> {
            ps.iter().map(|g| g.total()).collect()
        };
        let outputs = outputs
            .iter()
            .zip(sums)
            .map(|(name, s)| {
                let non_finite = s.non_finite.total()?;
                OutputReport::from_totals(
                    name,
                    s.value.paths(),
                    // A sum of 0/1 leaves: an exact integer below 2^53 paths.
                    non_finite as u64,
                    s.value.total()?,
                    s.square.total()?,
                    inputs,
                    &totals(&s.greeks)?,
                    &totals(&s.greek_squares)?,
                    &s.shifts,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Report { outputs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_tree(leaves: &[f64], a: usize, m: usize) -> f64 {
        if m == 1 {
            return leaves.get(a).copied().unwrap_or(-0.0);
        }
        naive_tree(leaves, a, m / 2) + naive_tree(leaves, a + m / 2, m / 2)
    }

    #[test]
    fn rows_summed_on_threads_have_every_columns_tree_bits() {
        // Columns of values across magnitudes and signed zeros, where the order shows.
        let value = |r: usize, c: usize| match (r * 7 + c * 3) % 11 {
            0 => -0.0,
            k => ((r as f64 * 0.37 + c as f64).sin()) * 10f64.powi(k as i32 * 3 - 12),
        };
        for n in [1usize, 2, 3, 5, 8, 13, 64, 100, 1000, 1025] {
            for width in [1usize, 3, 7] {
                let table: Vec<f64> = (0..n)
                    .flat_map(|r| (0..width).map(move |c| value(r, c)))
                    .collect();
                let want: Vec<u64> = (0..width)
                    .map(|c| {
                        let col: Vec<f64> = (0..n).map(|r| value(r, c)).collect();
                        naive_tree(&col, 0, n.next_power_of_two()).to_bits()
                    })
                    .collect();
                for threads in [1, 2, 3, 8] {
                    let mut rows = table.clone();
                    rows.extend(std::iter::repeat_n(1e300, width - 1)); // a partial row: ignored
                    let got: Vec<u64> = tree_sum_rows_on(&mut rows, width, threads, 1)
                        .iter()
                        .map(|x| x.to_bits())
                        .collect();
                    assert_eq!(got, want, "n {n} width {width} threads {threads}");
                }
            }
        }
        assert_eq!(tree_sum_rows(&mut [], 2), [0.0, 0.0]);
    }

    #[test]
    fn tree_sum_is_the_pairwise_tree() {
        assert_eq!(tree_sum(&[]), 0.0);
        assert_eq!(tree_sum(&[3.5]), 3.5);
        // ((1e16 + 1) + (-1e16 + 1)) = 1e16 + -1e16 + ... : the order shows in the bits.
        let x = [1e16, 1.0, -1e16, 1.0];
        assert_eq!(tree_sum(&x), (1e16 + 1.0) + (-1e16 + 1.0));
        assert_eq!(tree_sum(&x), 0.0);
        assert_eq!(x.iter().sum::<f64>(), 1.0); // left to right differs
        let y = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(tree_sum(&y), ((1.0 + 2.0) + (3.0 + 4.0)) + 5.0);
        // An all -0.0 run keeps its sign whatever its size (padding is -0.0); +0.0 wins a mix.
        assert!(tree_sum(&[-0.0, -0.0]).is_sign_negative());
        assert!(tree_sum(&[-0.0, -0.0, -0.0]).is_sign_negative());
        assert!(tree_sum(&[-0.0, 0.0, -0.0]).is_sign_positive());
        for n in 1..40usize {
            let v: Vec<f64> = (0..n)
                .map(|i| (i as f64 * 0.37).sin() * 10f64.powi(i as i32 % 7))
                .collect();
            assert_eq!(
                tree_sum(&v).to_bits(),
                naive_tree(&v, 0, n.next_power_of_two()).to_bits()
            );
        }
    }

    #[test]
    fn partial_tiling_is_maximal_blocks() {
        let leaves: Vec<f64> = (0..1000).map(|i| i as f64).collect();
        let p = PartialSums::from_leaves(5000, 1024, &leaves).unwrap();
        let shape: Vec<(u64, u32)> = p.blocks().iter().map(|b| (b.start, b.log2_len)).collect();
        assert_eq!(
            shape,
            [
                (1024, 9),
                (1536, 8),
                (1792, 7),
                (1920, 6),
                (1984, 5),
                (2016, 3)
            ]
        );
        assert_eq!(p.covered(), 1000);
        assert_eq!(
            p.total(),
            Err(ReportError::Incomplete {
                covered: 1000,
                paths: 5000
            })
        );
        // A tail run: [4096, 5000) closes with zero padding up to the root 8192.
        let tail = PartialSums::from_leaves(5000, 4096, &vec![1.0; 904]).unwrap();
        assert_eq!(
            tail.blocks()
                .iter()
                .map(|b| (b.start, b.log2_len))
                .collect::<Vec<_>>(),
            [(4096, 12)]
        );
    }

    #[test]
    fn rows_added_in_any_pieces_have_the_bits_of_each_column_s_tree_sum() {
        // 3 columns over 1000 paths, as a CPU thread's kernel writes them (row p is path p).
        let width = 3;
        let table: Vec<f64> = (0..1000 * width)
            .map(|i| ((i * 7919) % 997) as f64 * 1e-3 - 0.41)
            .collect();
        let column =
            |c: usize| -> Vec<f64> { table.iter().skip(c).step_by(width).copied().collect() };
        // Ragged pieces, out of order, some unaligned: the canonical blocks make order irrelevant.
        let pieces = [(700u64, 1000u64), (0, 3), (3, 512), (512, 700)];
        let mut cols: Vec<PartialSums> = (0..width)
            .map(|_| PartialSums::empty(1000).unwrap())
            .collect();
        for (a, b) in pieces {
            let mut rows = table[a as usize * width..b as usize * width].to_vec();
            PartialSums::add_rows(&mut cols, a, &mut rows).unwrap();
        }
        for (c, sums) in cols.iter().enumerate() {
            assert_eq!(
                sums.total().unwrap().to_bits(),
                tree_sum(&column(c)).to_bits()
            );
        }
        // A range held already, or past the run, is refused and changes nothing.
        let mut part: Vec<PartialSums> = (0..width)
            .map(|_| PartialSums::from_leaves(1000, 0, &column(0)[..600]).unwrap())
            .collect();
        let before = part.clone();
        let mut rows = table[500 * width..700 * width].to_vec();
        assert!(matches!(
            PartialSums::add_rows(&mut part, 500, &mut rows),
            Err(ReportError::Overlap { .. })
        ));
        let mut rows = table[..width * 2].to_vec();
        assert!(matches!(
            PartialSums::add_rows(&mut part, 999, &mut rows),
            Err(ReportError::OutOfRange { .. })
        ));
        let mut ragged = vec![0.0; width + 1];
        assert!(PartialSums::add_rows(&mut part, 600, &mut ragged).is_err());
        assert_eq!(part, before);
    }

    #[test]
    fn padded_workgroup_blocks_merge_with_leaf_runs() {
        // 1000 paths; a backend sums workgroups of 256 leaves with zero padding past the end.
        let leaves: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f64 * 1e-3 - 0.37)
            .collect();
        let blocks: Vec<Block> = (0..4u64)
            .map(|w| Block {
                start: 256 * w,
                log2_len: 8,
                sum: naive_tree(&leaves, 256 * w as usize, 256),
            })
            .collect();
        let gpu = PartialSums::from_blocks(1000, &blocks).unwrap();
        assert_eq!(gpu.total().unwrap().to_bits(), tree_sum(&leaves).to_bits());
        let mut cpu = PartialSums::from_leaves(1000, 0, &leaves[..512]).unwrap();
        cpu.merge(&PartialSums::from_blocks(1000, &blocks[2..]).unwrap())
            .unwrap();
        assert_eq!(cpu.total().unwrap().to_bits(), tree_sum(&leaves).to_bits());
        assert_eq!(cpu, gpu);
        // The padded block overlaps a leaf run of the same paths.
        let tail = PartialSums::from_leaves(1000, 992, &leaves[992..]).unwrap();
        let mut g = PartialSums::from_blocks(1000, &blocks[3..]).unwrap();
        assert!(matches!(g.merge(&tail), Err(ReportError::Overlap { .. })));
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(PartialSums::empty(0), Err(ReportError::NoPaths));
        let mut a = PartialSums::from_leaves(10, 0, &[1.0; 4]).unwrap();
        let b = PartialSums::from_leaves(10, 2, &[1.0; 4]).unwrap();
        let before = a.clone();
        assert!(matches!(a.merge(&b), Err(ReportError::Overlap { .. })));
        assert_eq!(a, before);
        let c = PartialSums::from_leaves(11, 4, &[1.0; 4]).unwrap();
        assert_eq!(
            a.merge(&c),
            Err(ReportError::PathsMismatch {
                left: 10,
                right: 11
            })
        );
        assert!(matches!(
            PartialSums::from_leaves(10, 8, &[1.0; 3]),
            Err(ReportError::OutOfRange { .. })
        ));
        let bad = Block {
            start: 2,
            log2_len: 2,
            sum: 0.0,
        };
        assert_eq!(
            PartialSums::from_blocks(10, &[bad]),
            Err(ReportError::Misaligned {
                start: 2,
                log2_len: 2
            })
        );
        let big = Block {
            start: 0,
            log2_len: 5,
            sum: 0.0,
        };
        assert!(matches!(
            PartialSums::from_blocks(10, &[big]),
            Err(ReportError::OutOfRange { .. })
        ));
        let e = ReportError::Incomplete {
            covered: 3,
            paths: 10,
        }
        .to_string();
        assert_eq!(
            e,
            "the sums cover 3 of 10 paths; the total needs all of them"
        );
    }

    #[test]
    fn report_statistics() {
        // Paths 1, 2, 3, 4: mean 2.5, sample variance 5/3.
        let v = [1.0, 2.0, 3.0, 4.0];
        let d = vec![vec![2.0, 2.0, 2.0, 4.0], vec![0.0; 4]];
        let s = OutputSums::from_leaves(4, 0, &v, &d, &[0.0, 0.0, 0.0], true).unwrap();
        let names = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let r = Report::from_sums(&names(&["price"]), &names(&["spot", "vol"]), &[s]).unwrap();
        let o = &r.outputs[0];
        assert_eq!(o.name, "price");
        assert_eq!(o.value, 2.5);
        assert_eq!(o.stderr, ((30.0 - 4.0 * 2.5 * 2.5) / 3.0f64).sqrt() / 2.0);
        assert_eq!(
            o.greeks,
            vec![("spot".to_string(), 2.5), ("vol".to_string(), 0.0)]
        );
        // spot's derivative: 2, 2, 2, 4 (mean 2.5, sample variance 1); vol's: constant.
        assert_eq!(o.greek_stderr, vec![0.5, 0.0]);
        assert_eq!(o.non_finite, 0);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(
            json,
            r#"{"outputs":[{"name":"price","value":2.5,"stderr":0.6454972243679028,"greeks":[["spot",2.5],["vol",0.0]],"greek_stderr":[0.5,0.0],"non_finite":0}]}"#
        );
        // The shift changes nothing but rounding.
        let shifted = OutputSums::from_leaves(4, 0, &v, &d, &[3.0, 2.0, -1.0], true).unwrap();
        let r2 =
            Report::from_sums(&names(&["price"]), &names(&["spot", "vol"]), &[shifted]).unwrap();
        assert_eq!(r2.outputs[0].stderr, o.stderr);
        assert_eq!(r2.outputs[0].greek_stderr, o.greek_stderr);
        assert!(standard_error(1, 5.0, 0.0, 5.0).is_nan()); // one path: undefined
        assert_eq!(standard_error(3, 3.0, 0.0, 1.0), 0.0); // constant paths
        assert!(standard_error(3, f64::NAN, 0.0, 0.0).is_nan());
        let short = OutputSums::from_leaves(4, 0, &v, &[vec![1.0]], &[0.0, 0.0], true);
        assert!(matches!(short, Err(ReportError::Shape { .. })));
        let partial = OutputSums::from_leaves(8, 0, &v, &d, &[0.0], false).unwrap();
        let r = Report::from_sums(&names(&["p"]), &names(&["a", "b"]), &[partial]);
        assert_eq!(
            r,
            Err(ReportError::Incomplete {
                covered: 4,
                paths: 8
            })
        );
    }

    /// An output of 1e8 + N(0,1)-like noise: the one-pass variance about 0 cancels to nothing,
    /// the squares about path 0's value keep it.
    #[test]
    fn no_catastrophic_cancellation() {
        let n = 100_000usize;
        let noise: Vec<f64> = (0..n)
            .map(|i| crate::philox::normal_f64(7, i as u64, 0))
            .collect();
        let v: Vec<f64> = noise.iter().map(|z| 1e8 + z).collect();
        let d = vec![v.clone()]; // a Greek of the same size
        let naive = OutputSums::from_leaves(n as u64, 0, &v, &d, &[0.0, 0.0], true).unwrap();
        let names = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let r = Report::from_sums(&names(&["x"]), &names(&["a"]), &[naive]).unwrap();
        let want = {
            let mean = noise.iter().sum::<f64>() / n as f64;
            let var = noise.iter().map(|z| (z - mean) * (z - mean)).sum::<f64>() / (n - 1) as f64;
            (var / n as f64).sqrt()
        };
        // About 0 the variance is lost (what the report printed before shifts).
        assert!(
            (r.outputs[0].stderr - want).abs() > 0.1 * want,
            "{}",
            r.outputs[0].stderr
        );
        let c = v[0];
        let shifted = OutputSums::from_leaves(n as u64, 0, &v, &d, &[c, c], true).unwrap();
        let r = Report::from_sums(&names(&["x"]), &names(&["a"]), &[shifted]).unwrap();
        let o = &r.outputs[0];
        assert!(
            (o.stderr - want).abs() < 1e-6 * want,
            "{} vs {want}",
            o.stderr
        );
        assert!((o.greek_stderr[0] - want).abs() < 1e-6 * want);
        assert!((o.stderr - 1.0 / (n as f64).sqrt()).abs() < 0.01 / (n as f64).sqrt());
    }

    /// A path whose value or Greek is NaN or infinite is counted and left out of every sum of
    /// that output; a report with no path left is NaN (JSON null), never `± 0`.
    #[test]
    fn non_finite_paths_are_counted_and_left_out() {
        let v = [1.0, f64::NAN, 3.0, 5.0, 7.0];
        let d = vec![vec![1.0, 1.0, f64::INFINITY, 1.0, 3.0]];
        let s = OutputSums::from_leaves(5, 0, &v, &d, &[1.0, 1.0], true).unwrap();
        let names = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let r = Report::from_sums(&names(&["p"]), &names(&["a"]), &[s]).unwrap();
        let o = &r.outputs[0];
        assert_eq!(o.non_finite, 2);
        // Paths 0, 3, 4: values 1, 5, 7; Greeks 1, 1, 3.
        assert_eq!(o.value, 13.0 / 3.0);
        assert_eq!(o.greeks[0].1, 5.0 / 3.0);
        let var = ((1.0f64 - 13.0 / 3.0).powi(2)
            + (5.0f64 - 13.0 / 3.0).powi(2)
            + (7.0f64 - 13.0 / 3.0).powi(2))
            / 2.0;
        assert!((o.stderr - (var / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(
            output_leaves(f64::NAN, &[1.0], &[0.0, 0.0], true),
            [0.0, 0.0, 0.0, 0.0, 1.0]
        );
        assert_eq!(output_leaves(2.0, &[], &[1.0], false), [2.0, 1.0, 0.0]);
        let all_bad =
            OutputSums::from_leaves(2, 0, &[f64::NAN, f64::INFINITY], &[], &[0.0], false).unwrap();
        let r = Report::from_sums(&names(&["p"]), &[], &[all_bad]).unwrap();
        let o = &r.outputs[0];
        assert_eq!(o.non_finite, 2);
        assert!(o.value.is_nan() && o.stderr.is_nan());
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(
            json,
            r#"{"outputs":[{"name":"p","value":null,"stderr":null,"greeks":[],"greek_stderr":[],"non_finite":2}]}"#
        );
        // Sums about other shifts do not merge.
        let a = OutputSums::from_leaves(2048, 0, &[1.0; 1024], &[], &[0.0], false).unwrap();
        let mut b = OutputSums::from_leaves(2048, 1024, &[1.0; 1024], &[], &[1.0], false).unwrap();
        assert_eq!(b.merge(&a), Err(ReportError::Shifts));
    }

    fn leaf() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            (-1e6f64..1e6),
            (-1.0f64..1.0).prop_map(|x| x * 1e-12),
            (-1.0f64..1.0).prop_map(|x| x * 1e15),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Cutting a run anywhere, summing the pieces separately and merging them in any order and
        /// grouping gives exactly the single run's bits.
        #[test]
        fn merging_rebuilds_the_single_run(
            leaves in prop::collection::vec(leaf(), 1..300),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            order in any::<u64>(),
        ) {
            let n = leaves.len();
            let paths = n as u64;
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(n + 1)).collect();
            points.push(0);
            points.push(n);
            points.sort_unstable();
            points.dedup();
            let mut parts: Vec<PartialSums> = points
                .windows(2)
                .map(|w| PartialSums::from_leaves(paths, w[0] as u64, &leaves[w[0]..w[1]]).unwrap())
                .collect();
            // A pseudo-random order and grouping: repeatedly merge two chosen parts.
            let mut state = order | 1;
            while parts.len() > 1 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (state >> 33) as usize % parts.len();
                let b = parts.swap_remove(i);
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let j = (state >> 33) as usize % parts.len();
                if state & (1 << 20) == 0 {
                    parts[j].merge(&b).unwrap();
                } else {
                    let mut b = b;
                    b.merge(&parts[j]).unwrap();
                    parts[j] = b;
                }
            }
            let total = parts[0].total().unwrap();
            prop_assert_eq!(total.to_bits(), tree_sum(&leaves).to_bits());
            prop_assert_eq!(total.to_bits(), naive_tree(&leaves, 0, n.next_power_of_two()).to_bits());
        }

        /// Group partials in ascending order (the stack merge) give exactly the blocks, bits
        /// included, that inserting them one by one in another order gives (the map merge).
        #[test]
        fn ascending_blocks_merge_as_inserted_ones(
            sums in prop::collection::vec(leaf(), 1..200),
            log2 in 0u32..4,
            first in 0usize..50,
            tail in 0u64..16,
        ) {
            let len = 1u64 << log2;
            // The last group may be partial, but no block may outgrow the tree's root: a single
            // group keeps more than half its length (1 path of a 2-path group has a 1-path root).
            let groups = (first + sums.len()) as u64;
            let cut = if groups == 1 { tail.min((len - 1) / 2) } else { tail.min(len - 1) };
            let paths = groups * len - cut;
            let blocks: Vec<Block> = sums
                .iter()
                .enumerate()
                .map(|(g, &sum)| Block { start: (first + g) as u64 * len, log2_len: log2, sum })
                .collect();
            let fast = PartialSums::from_blocks(paths, &blocks).unwrap();
            let reversed: Vec<Block> = blocks.iter().rev().copied().collect();
            let slow = PartialSums::from_blocks(paths, &reversed).unwrap();
            let bits = |p: &PartialSums| p.blocks().iter().map(|b| (b.start, b.log2_len, b.sum.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(&fast), bits(&slow));
            let width = 3;
            let mut rows: Vec<f64> = sums.iter().flat_map(|&x| [x, -x * 0.5, x * x]).collect();
            let cols = tree_sum_rows(&mut rows, width);
            for (c, got) in cols.iter().enumerate() {
                let col: Vec<f64> = sums.iter().map(|&x| [x, -x * 0.5, x * x][c]).collect();
                prop_assert_eq!(got.to_bits(), tree_sum(&col).to_bits());
            }
            if first == 0 {
                let leaves: Vec<f64> = sums.clone();
                prop_assert_eq!(fast.total().unwrap().to_bits(), tree_sum(&leaves).to_bits());
                let tiled = PartialSums::from_tiling_sum(paths, log2, sums.len() as u64, tree_sum(&sums)).unwrap();
                prop_assert_eq!(bits(&tiled), bits(&slow));
            }
        }
    }
}
