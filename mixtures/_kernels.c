/* The global-quota sampler's hot loops, in plain C (compiled on first use by
 * mixtures/native.py; mixtures/schedule.py and boundaries.py hold the numpy reference they must match
 * exactly).
 *
 * Notation as in schedule.py: component k has weight a_k / S; y_k(t) = a_k t / S; a batch starts at
 * T with floor(y_k(T)) and remainder r_k = a_k T mod S.
 */
#include <stdint.h>

/* Per batch b of `count`: Phi(T+m) = sum_k frac(y_k(T+m)) and Psi(T+m) = #non-integer y_k - Phi,
 * for m = 1..W, reduced to first_drop[b, j-1] (first m with min Phi so far < j, W+1 if none) and
 * last_short[b, j-1] (#leading m whose min Psi over [m, W-1] is < j) for j = 1..K.
 * phi0[b] = Phi(T); rem0[b*K + k] = r_k at T. Scratch: r (K), phi and psi (W). */
void batch_tables(int64_t K, const int64_t *numer, int64_t W, int64_t S, int64_t count,
                  const int64_t *phi0, const int64_t *rem0, int64_t *first_drop,
                  int64_t *last_short, int64_t *r, int64_t *phi, int64_t *psi)
{
    int64_t active = 0;
    for (int64_t k = 0; k < K; k++)
        active += numer[k] > 0;
    for (int64_t b = 0; b < count; b++) {
        int64_t cur = phi0[b];
        for (int64_t k = 0; k < K; k++)
            r[k] = rem0[b * K + k];
        for (int64_t m = 0; m < W; m++) {
            int64_t crossed = 0, whole = 0;
            for (int64_t k = 0; k < K; k++) {
                int64_t a = numer[k];
                if (a == 0)
                    continue;
                int64_t x = r[k] + a;
                if (x >= S) {
                    x -= S;
                    crossed++;
                }
                whole += x == 0;
                r[k] = x;
            }
            cur += 1 - crossed;
            phi[m] = cur;
            psi[m] = active - whole - cur;
        }
        psi[W - 1] = K + 1; /* t = T + W is the next boundary itself */
        int64_t *drop = first_drop + b * K, *shortfall = last_short + b * K;
        for (int64_t j = 0; j < K; j++) {
            drop[j] = W + 1;
            shortfall[j] = 0;
        }
        int64_t low = K + 1;
        for (int64_t m = 0; m < W; m++) {
            if (phi[m] < low) {
                for (int64_t j = phi[m] + 1; j <= K && j <= low; j++)
                    if (j >= 1 && drop[j - 1] == W + 1)
                        drop[j - 1] = m + 1;
                low = phi[m];
            }
        }
        int64_t high = K + 2;
        for (int64_t m = W; m >= 1; m--) {
            if (psi[m - 1] < high) {
                for (int64_t j = psi[m - 1] + 1; j <= K && j <= high; j++)
                    if (j >= 1 && shortfall[j - 1] == 0)
                        shortfall[j - 1] = m;
                high = psi[m - 1];
            }
        }
    }
}

/* Earliest deadline first inside each of `rows` batches of W samples. For batch b and component k:
 * counts[b*K+k] copies, the first of which is integer n = first[b*K+k] above floor(y_k(T)) with
 * remainder rem0; base[b*K+k] = its draw number. A copy n may sit at step m in
 * [floor((nS - S - r)/a) + 1, ceil((nS - r)/a)]; deadlines past the batch count as W + 1 and ties
 * go to the lower component (as the numpy reference). Writes component and draw per sample.
 * Returns -1, or b * W + m for the first step with no released copy or a missed deadline.
 * Scratch: 7 * K int64. */
int64_t edf_batches(int64_t K, const int64_t *numer, int64_t W, int64_t S, int64_t rows,
                    const int64_t *counts, const int64_t *first, const int64_t *rem0,
                    const int64_t *base, int16_t *component, int64_t *draw, int64_t *scratch)
{
    /* Copy n's reach x = nS - r is kept as x = q a + u: its deadline is q + (u > 0) and the next
     * copy's release is q + 1, so the loop needs no division. */
    const int64_t never = INT64_MAX;
    int64_t *left = scratch, *q = scratch + K, *u = scratch + 2 * K, *release = scratch + 3 * K;
    int64_t *cursor = scratch + 4 * K, *step_q = scratch + 5 * K, *step_u = scratch + 6 * K;
    for (int64_t k = 0; k < K; k++) {
        int64_t a = numer[k] > 0 ? numer[k] : 1;
        step_q[k] = S / a;
        step_u[k] = S % a;
    }
    for (int64_t b = 0; b < rows; b++) {
        for (int64_t k = 0; k < K; k++) {
            int64_t i = b * K + k, a = numer[k] > 0 ? numer[k] : 1;
            int64_t x = first[i] * S - rem0[i], before = x - S;
            left[k] = counts[i];
            cursor[k] = base[i];
            q[k] = x / a;
            u[k] = x % a;
            release[k] = left[k] > 0 ? (before < 0 ? 0 : before / a + 1) : never;
        }
        for (int64_t m = 1; m <= W; m++) {
            int64_t pick = -1, best = never;
            for (int64_t k = 0; k < K; k++) {
                if (release[k] > m)
                    continue;
                int64_t d = q[k] + (u[k] > 0);
                if (d > W + 1)
                    d = W + 1;
                if (d < best) {
                    best = d;
                    pick = k;
                }
            }
            if (pick < 0 || best < m)
                return b * W + m;
            component[b * W + m - 1] = (int16_t)pick;
            draw[b * W + m - 1] = cursor[pick]++;
            if (--left[pick] > 0) {
                int64_t a = numer[pick];
                release[pick] = q[pick] + 1;
                q[pick] += step_q[pick];
                u[pick] += step_u[pick];
                if (u[pick] >= a) {
                    u[pick] -= a;
                    q[pick]++;
                }
            } else {
                release[pick] = never;
            }
        }
    }
    return -1;
}

/* Insertion sort (stable): by key ascending, or descending when `down`. */
static void sort_keys(int64_t *v, int64_t n, int down)
{
    for (int64_t i = 1; i < n; i++) {
        int64_t x = v[i], j = i - 1;
        while (j >= 0 && (down ? v[j] < x : v[j] > x)) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

/* Chain capacity check: sorted descending (or ascending), the j-th value must pass against
 * limit[j-1]; see boundaries._Slots.fits for its uses. */
static int chain_ok(int64_t *v, int64_t n, int kind, const int64_t *limit, int64_t W)
{
    sort_keys(v, n, kind != 1);
    for (int64_t j = 1; j <= n; j++) {
        int64_t x = v[j - 1];
        if (kind == 0) { /* catch-up step tau vs room */
            if (x < 2)
                break;
            if (x > limit[j - 1])
                return 0;
        } else if (kind == 1) { /* pass step sigma vs shortfall */
            if (x > W - 1)
                break;
            if ((x > 1 ? x : 1) <= limit[j - 1])
                return 0;
        } else { /* forced lead in boundaries vs lag */
            if (x < 1)
                break;
            if (x >= limit[j - 1])
                return 0;
        }
    }
    return 1;
}

/* The boundary planner's common case (boundaries._BoundaryPlanner.choices, first candidate) for
 * consecutive batches: ceils to the optional components with the earliest batch deadline (then
 * the soonest catch-up), accepted when boundaries._Slots.fits would accept them. Rows (per batch,
 * K wide) as boundaries._BoundaryPlanner._rows (in its order). Updates state, writes count rows,
 * and returns how many batches it decided; it stops at the first batch whose first candidate
 * fails (Python then tries the alternatives). Scratch: 4 * K int64. */
int64_t plan_fast(int64_t K, int64_t W, int64_t extras, const int64_t *quota,
                  const int64_t *fractional, int64_t rows, const int64_t *lo, const int64_t *rem,
                  const int64_t *tau, const int64_t *sigma, const int64_t *room,
                  const int64_t *shortfall, const int64_t *due, const int64_t *ahead_for,
                  const int64_t *behind_for, const int64_t *lag_up, const int64_t *lag_down,
                  const int64_t *ahead_next, const int64_t *lag_next, int64_t *state,
                  int64_t *counts, int64_t *scratch)
{
    int64_t *mandatory = scratch, *optional = scratch + K, *ahead = scratch + 2 * K;
    int64_t *behind = scratch + 3 * K;
    int64_t values[4096];
    if (K > 4096)
        return 0;
    for (int64_t b = 0; b < rows; b++) {
        int64_t o = b * K;
        const int64_t *L = lo + o, *R = rem + o, *TA = tau + o, *DU = due + o;
        int64_t nm = 0, no = 0, na = 0, nb = 0;
        for (int64_t k = 0; k < K; k++) {
            int64_t f = L[k], base = state[k] + quota[k];
            if (base + 1 == f && fractional[k]) {
                mandatory[nm++] = k;
                if (R[k])
                    behind[nb++] = k;
            } else if (base == f) {
                if (!R[k])
                    continue;
                if (fractional[k])
                    optional[no++] = k;
                else
                    behind[nb++] = k;
            } else if (base == f + 1 && R[k]) {
                ahead[na++] = k;
            } else {
                return b;
            }
        }
        int64_t need = extras - nm;
        if (need < 0 || need > no)
            return b;
        /* stable sort of the optional components by (due, tau) */
        for (int64_t i = 1; i < no; i++) {
            int64_t x = optional[i], j = i - 1;
            while (j >= 0 && (DU[optional[j]] > DU[x] ||
                              (DU[optional[j]] == DU[x] && TA[optional[j]] > TA[x]))) {
                optional[j + 1] = optional[j];
                j--;
            }
            optional[j + 1] = x;
        }
        for (int64_t i = 0; i < no; i++) {
            if (i < need)
                ahead[na++] = optional[i];
            else
                behind[nb++] = optional[i];
        }
        /* the capacity chains of boundaries._Slots.fits: members, their values, kind, limits */
        const int64_t *member[5] = {ahead, behind, ahead, behind, ahead};
        const int64_t count[5] = {na, nb, na, nb, na};
        const int64_t *source[5] = {tau + o, sigma + o, ahead_for + o, behind_for + o,
                                    ahead_next + o};
        const int64_t *limit[5] = {room + o, shortfall + o, lag_up + o, lag_down + o,
                                   lag_next + o};
        const int kind[5] = {0, 1, 2, 2, 2};
        int fits = 1;
        for (int c = 0; c < 5 && fits; c++) {
            for (int64_t i = 0; i < count[c]; i++)
                values[i] = source[c][member[c][i]];
            fits = chain_ok(values, count[c], kind[c], limit[c], W);
        }
        if (!fits)
            return b;
        int64_t *row = counts + o;
        for (int64_t k = 0; k < K; k++)
            row[k] = quota[k];
        for (int64_t i = 0; i < nm; i++)
            row[mandatory[i]]++;
        for (int64_t i = 0; i < need; i++)
            row[optional[i]]++;
        for (int64_t k = 0; k < K; k++)
            state[k] += row[k];
    }
    return rows;
}
