// Column generation for the pattern LP (see pattern_lp.h).
#include "shardkit/packing/internal/pattern_lp.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "shardkit/base/internal/runs.h"

namespace shardkit::internal {

namespace {

// A pattern improves the basis when its duals sum to more than 1 + this.
constexpr double kPriceTolerance = 1e-9;
// Entries of the entering column below this are not pivots.
constexpr double kPivotTolerance = 1e-9;
// Refactorise the basis inverse after this many pivots (bounds the error the
// product-form updates accumulate).
constexpr Index kRefactorEvery = 512;

// A pattern as (length index, copies), length indices ascending.
using Column = std::vector<std::pair<Index, Index>>;

Column ToColumn(std::vector<Index> picks) {
  std::sort(picks.begin(), picks.end());
  Column c;
  AppendRuns(picks, &c);
  return c;
}

// Finds the pattern of the largest dual sum: at most k items (k <= 3: pairs
// of lengths plus the best third by a prefix maximum over capacity; k >= 4: a
// DP over item count and capacity). Lengths with duals <= 0 never help (a
// pattern without them is as good), so only positive ones are tried.
class Pricer {
 public:
  Pricer(std::span<const Index> len, Index capacity, Index k)
      : len_(len), capacity_(capacity), k_(k) {}

  // Arithmetic steps of one Best call with every dual positive.
  [[nodiscard]] double Cost() const {
    const double d = static_cast<double>(len_.size());
    const double c = static_cast<double>(capacity_);
    if (k_ <= 3) return c + d + d * d / 2;
    return c + static_cast<double>(k_) * (c + 1) * d;
  }

  // The best pattern's dual sum (0 for the empty pattern) into *best.
  double Best(const std::vector<double>& y, Column* best, Index* work) {
    pos_.clear();
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] > 0) pos_.push_back(static_cast<Index>(i));
    }
    std::vector<Index> picks;
    double value = 0;
    const Index p = static_cast<Index>(pos_.size());
    if (k_ <= 3) {
      // top_[r]: the length index of the largest dual among lengths <= r.
      top_val_.assign(static_cast<size_t>(capacity_) + 1, 0.0);
      top_idx_.assign(static_cast<size_t>(capacity_) + 1, -1);
      Index next = 0;
      double v = 0;
      Index vi = -1;
      for (Index r = 0; r <= capacity_; ++r) {
        while (next < p && len_[pos_[next]] == r) {
          if (y[pos_[next]] > v) {
            v = y[pos_[next]];
            vi = pos_[next];
          }
          ++next;
        }
        top_val_[r] = v;
        top_idx_[r] = vi;
      }
      *work += capacity_ + p;
      if (k_ == 1) {
        if (vi >= 0) {
          value = v;
          picks = {vi};
        }
      } else {
        for (Index a = 0; a < p; ++a) {
          const Index i = pos_[a];
          const Index rest = capacity_ - len_[i];
          const double with = y[i] + top_val_[rest];
          if (with > value) {
            value = with;
            picks = {i};
            if (top_idx_[rest] >= 0) picks.push_back(top_idx_[rest]);
          }
        }
        *work += p;
        if (k_ == 3) value = BestTriple(y, value, &picks, work);
      }
    } else {
      // f[j][r]: the largest dual sum of at most j items of total length
      // <= r; choice: the item added at (j, r), -1 for none.
      const size_t w = static_cast<size_t>(capacity_) + 1;
      f_.assign(w * static_cast<size_t>(k_ + 1), 0.0);
      choice_.assign(w * static_cast<size_t>(k_ + 1), -1);
      Index levels = 0;
      for (Index j = 1; j <= k_; ++j) {
        const double* prev = &f_[w * static_cast<size_t>(j - 1)];
        double* cur = &f_[w * static_cast<size_t>(j)];
        Index* ch = &choice_[w * static_cast<size_t>(j)];
        bool gained = false;
        for (Index r = 0; r <= capacity_; ++r) {
          double b = prev[r];
          Index c = -1;
          for (Index a = 0; a < p && len_[pos_[a]] <= r; ++a) {
            const Index i = pos_[a];
            const double with = prev[r - len_[i]] + y[i];
            if (with > b) {
              b = with;
              c = i;
            }
          }
          cur[r] = b;
          ch[r] = c;
          gained = gained || c >= 0;
        }
        *work += (capacity_ + 1) * p;
        levels = j;
        if (!gained) break;  // more items cannot add value
      }
      value = f_[w * static_cast<size_t>(levels) + static_cast<size_t>(capacity_)];
      Index r = capacity_;
      for (Index j = levels; j >= 1; --j) {
        const Index c = choice_[w * static_cast<size_t>(j) + static_cast<size_t>(r)];
        if (c >= 0) {
          picks.push_back(c);
          r -= len_[c];
        }
      }
    }
    *best = ToColumn(std::move(picks));
    return value;
  }

 private:
  // The triples (i, j, the best third within the rest) of positive lengths,
  // i <= j: the first in (i, j) order whose dual sum (y_i + y_j) + top is
  // above `value` and the largest, as one scan with a strict > would find it
  // (the same sums, bit for bit, so the same column enters). Each i's block
  // of j is reduced to its largest sum with four independent maxima, then
  // searched for its first position only when that beats `value`: the serial
  // compare-and-branch per pair was most of the LP's time.
  double BestTriple(const std::vector<double>& y, double value, std::vector<Index>* picks,
                    Index* work) {
    const Index p = static_cast<Index>(pos_.size());
    py_.resize(static_cast<size_t>(p));
    pl_.resize(static_cast<size_t>(p));
    for (Index a = 0; a < p; ++a) {
      py_[a] = y[pos_[a]];
      pl_[a] = len_[pos_[a]];
    }
    const double* top = top_val_.data();
    Index end = p;  // first b with pl_[a] + pl_[b] > capacity_ (falls as a grows)
    for (Index a = 0; a < p; ++a) {
      *work += p - a;
      const Index room = capacity_ - pl_[a];
      while (end > a && pl_[end - 1] > room) --end;
      if (end <= a) {
        // Lengths ascend: no later a has a pair either (their work counted
        // as the pair loop it replaces counted it).
        *work += (p - a - 1) * (p - a) / 2;
        break;
      }
      const double yi = py_[a];
      double m0 = -1, m1 = -1, m2 = -1, m3 = -1;  // sums are >= 0 (positive duals)
      Index b = a;
      for (; b + 4 <= end; b += 4) {
        const double w0 = (yi + py_[b]) + top[room - pl_[b]];
        const double w1 = (yi + py_[b + 1]) + top[room - pl_[b + 1]];
        const double w2 = (yi + py_[b + 2]) + top[room - pl_[b + 2]];
        const double w3 = (yi + py_[b + 3]) + top[room - pl_[b + 3]];
        m0 = w0 > m0 ? w0 : m0;
        m1 = w1 > m1 ? w1 : m1;
        m2 = w2 > m2 ? w2 : m2;
        m3 = w3 > m3 ? w3 : m3;
      }
      for (; b < end; ++b) {
        const double w = (yi + py_[b]) + top[room - pl_[b]];
        m0 = w > m0 ? w : m0;
      }
      const double m = std::max(std::max(m0, m1), std::max(m2, m3));
      if (!(m > value)) continue;
      for (b = a; b < end; ++b) {
        if ((yi + py_[b]) + top[room - pl_[b]] == m) break;
      }
      value = m;
      const Index rest = room - pl_[b];
      *picks = {pos_[a], pos_[b]};
      if (top_idx_[rest] >= 0) picks->push_back(top_idx_[rest]);
    }
    return value;
  }

  std::span<const Index> len_;
  Index capacity_, k_;
  std::vector<Index> pos_;
  std::vector<double> py_;  // BestTriple: duals and lengths of pos_, in order
  std::vector<Index> pl_;
  std::vector<double> top_val_;
  std::vector<Index> top_idx_;
  std::vector<double> f_;
  std::vector<Index> choice_;
};

class Simplex {
 public:
  Simplex(std::span<const Index> len, std::span<const Index> counts, Index capacity, Index k)
      : d_(static_cast<Index>(len.size())),
        counts_(counts),
        basis_(static_cast<size_t>(d_)),
        binv_(static_cast<size_t>(d_ * d_), 0.0),
        x_(static_cast<size_t>(d_)),
        y_(static_cast<size_t>(d_)) {
    // Start: every length alone, as many copies as fit (a diagonal basis).
    for (Index j = 0; j < d_; ++j) {
      const Index m = len[j] == 0 ? k : std::max<Index>(1, std::min(k, capacity / len[j]));
      basis_[j] = {{j, m}};
      binv_[At(j, j)] = 1.0 / static_cast<double>(m);
      x_[j] = static_cast<double>(counts[j]) / static_cast<double>(m);
      y_[j] = 1.0 / static_cast<double>(m);
    }
  }

  // Column c (a length), row i (a basis position) of the basis inverse.
  [[nodiscard]] size_t At(Index i, Index c) const { return static_cast<size_t>(c * d_ + i); }

  // Brings q into the basis. False when no entry of B^-1 a_q is a pivot.
  bool Pivot(const Column& q, Index* work) {
    dir_.assign(static_cast<size_t>(d_), 0.0);
    for (auto [c, m] : q) {
      const double* col = &binv_[At(0, c)];
      const double mm = static_cast<double>(m);
      for (Index i = 0; i < d_; ++i) dir_[i] += mm * col[i];
    }
    *work += d_ * static_cast<Index>(q.size());
    Index r = -1;
    double theta = 0;
    for (Index i = 0; i < d_; ++i) {
      if (dir_[i] <= kPivotTolerance) continue;
      const double t = std::max(0.0, x_[i]) / dir_[i];
      if (r < 0 || t < theta || (t == theta && dir_[i] > dir_[r])) {
        r = i;
        theta = t;
      }
    }
    *work += d_;
    if (r < 0) return false;
    for (Index i = 0; i < d_; ++i) x_[i] = std::max(0.0, x_[i] - theta * dir_[i]);
    x_[r] = theta;
    const double dr = dir_[r];
    // The columns with a nonzero entry in row r change. Each column's update
    // and sum run in the same order as one column at a time (the same bits,
    // so the same pivots and packs); four columns are interleaved so that
    // their serial sums (the dual values) overlap.
    cols_.clear();
    for (Index c = 0; c < d_; ++c) {
      if (binv_[At(r, c)] / dr != 0) cols_.push_back(c);
    }
    auto finish = [&](Index c, double* col, double t, double sum) {
      sum += t - col[r];
      col[r] = t;
      y_[c] = sum;
      *work += 2 * d_;
    };
    const size_t n = cols_.size();
    size_t g = 0;
    for (; g + 4 <= n; g += 4) {
      double* c0 = &binv_[At(0, cols_[g])];
      double* c1 = &binv_[At(0, cols_[g + 1])];
      double* c2 = &binv_[At(0, cols_[g + 2])];
      double* c3 = &binv_[At(0, cols_[g + 3])];
      const double t0 = c0[r] / dr, t1 = c1[r] / dr, t2 = c2[r] / dr, t3 = c3[r] / dr;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (Index i = 0; i < d_; ++i) {
        const double di = dir_[i];
        c0[i] -= di * t0;
        s0 += c0[i];
        c1[i] -= di * t1;
        s1 += c1[i];
        c2[i] -= di * t2;
        s2 += c2[i];
        c3[i] -= di * t3;
        s3 += c3[i];
      }
      finish(cols_[g], c0, t0, s0);
      finish(cols_[g + 1], c1, t1, s1);
      finish(cols_[g + 2], c2, t2, s2);
      finish(cols_[g + 3], c3, t3, s3);
    }
    for (; g < n; ++g) {
      double* col = &binv_[At(0, cols_[g])];
      const double t = col[r] / dr;
      double sum = 0;
      for (Index i = 0; i < d_; ++i) {
        col[i] -= dir_[i] * t;
        sum += col[i];
      }
      finish(cols_[g], col, t, sum);
    }
    basis_[r] = q;
    return true;
  }

  // Recomputes B^-1 (Gauss-Jordan, partial pivoting; rows with a zero in the
  // pivot column are skipped, so a sparse basis costs less than d^3), then
  // x = B^-1 n and y = 1^T B^-1. False when the basis is singular.
  bool Refactor(Index* work) {
    const size_t n = static_cast<size_t>(d_);
    // a: B row-major (row = length, column = basis position); e: identity.
    std::vector<double> a(n * n, 0.0), e(n * n, 0.0);
    for (Index j = 0; j < d_; ++j) {
      for (auto [c, m] : basis_[j]) a[static_cast<size_t>(c) * n + j] = static_cast<double>(m);
      e[static_cast<size_t>(j) * n + j] = 1.0;
    }
    for (size_t j = 0; j < n; ++j) {
      size_t p = j;
      for (size_t i = j + 1; i < n; ++i) {
        if (std::abs(a[i * n + j]) > std::abs(a[p * n + j])) p = i;
      }
      if (std::abs(a[p * n + j]) < 1e-12) return false;
      if (p != j) {
        std::swap_ranges(a.begin() + static_cast<std::ptrdiff_t>(p * n),
                         a.begin() + static_cast<std::ptrdiff_t>(p * n + n),
                         a.begin() + static_cast<std::ptrdiff_t>(j * n));
        std::swap_ranges(e.begin() + static_cast<std::ptrdiff_t>(p * n),
                         e.begin() + static_cast<std::ptrdiff_t>(p * n + n),
                         e.begin() + static_cast<std::ptrdiff_t>(j * n));
      }
      const double inv = 1.0 / a[j * n + j];
      for (size_t c = 0; c < n; ++c) {
        a[j * n + c] *= inv;
        e[j * n + c] *= inv;
      }
      for (size_t i = 0; i < n; ++i) {
        const double f = a[i * n + j];
        if (i == j || f == 0) continue;
        for (size_t c = 0; c < n; ++c) {
          a[i * n + c] -= f * a[j * n + c];
          e[i * n + c] -= f * e[j * n + c];
        }
        *work += 2 * d_;
      }
      *work += 3 * d_;
    }
    // e = B^-1: row i = basis position, column c = length.
    for (Index i = 0; i < d_; ++i) {
      for (Index c = 0; c < d_; ++c) binv_[At(i, c)] = e[static_cast<size_t>(i) * n + c];
    }
    for (Index i = 0; i < d_; ++i) {
      double s = 0;
      for (Index c = 0; c < d_; ++c) s += binv_[At(i, c)] * static_cast<double>(counts_[c]);
      x_[i] = std::max(0.0, s);
    }
    for (Index c = 0; c < d_; ++c) {
      double s = 0;
      for (Index i = 0; i < d_; ++i) s += binv_[At(i, c)];
      y_[c] = s;
    }
    *work += 3 * d_ * d_;
    return true;
  }

  const std::vector<double>& duals() const { return y_; }
  const std::vector<double>& x() const { return x_; }
  const std::vector<Column>& basis() const { return basis_; }

 private:
  Index d_;
  std::span<const Index> counts_;
  std::vector<Column> basis_;
  std::vector<double> binv_;  // column-major: binv_[At(i, c)]
  std::vector<Index> cols_;   // Pivot: the columns it changes
  std::vector<double> x_, y_, dir_;
};

}  // namespace

std::optional<PatternLpResult> SolvePatternLp(std::span<const Index> lengths,
                                              std::span<const Index> counts, Index capacity,
                                              Index max_sequences, Index work_limit) {
  const Index d = static_cast<Index>(lengths.size());
  if (d > kPatternLpMaxLengths) return std::nullopt;
  PatternLpResult out;
  if (d == 0) {
    out.optimal = true;
    return out;
  }
  Pricer pricer(lengths, capacity, max_sequences);
  // Column generation takes a few pivots per length: skip it when the limit
  // does not leave room for 4 per length.
  if (pricer.Cost() * 4 * static_cast<double>(d) > static_cast<double>(work_limit)) {
    return std::nullopt;
  }
  Simplex simplex(lengths, counts, capacity, max_sequences);
  Index since_refactor = 0;
  bool retried = false;
  Column q;
  while (out.work <= work_limit) {
    const double value = pricer.Best(simplex.duals(), &q, &out.work);
    if (value <= 1 + kPriceTolerance) {
      out.optimal = true;
      break;
    }
    if (!simplex.Pivot(q, &out.work)) {
      // Round-off hid the pivot: start again from a fresh inverse, once.
      if (retried || !simplex.Refactor(&out.work)) break;
      retried = true;
      since_refactor = 0;
      continue;
    }
    retried = false;
    ++out.pivots;
    if (++since_refactor >= kRefactorEvery) {
      if (!simplex.Refactor(&out.work)) return std::nullopt;
      since_refactor = 0;
    }
  }
  if (!simplex.Refactor(&out.work)) return std::nullopt;
  out.duals = simplex.duals();
  for (Index j = 0; j < d; ++j) {
    std::vector<Index> p;
    for (auto [c, m] : simplex.basis()[j]) p.insert(p.end(), static_cast<size_t>(m), lengths[c]);
    std::sort(p.begin(), p.end(), std::greater<>());
    out.patterns.push_back(std::move(p));
    out.x.push_back(simplex.x()[j]);
    out.objective += simplex.x()[j];
  }
  return out;
}

}  // namespace shardkit::internal
