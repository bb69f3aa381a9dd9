"""What one call of a stage costs, with the interval it is known to.

A probed call's corrected latency is its raw latency (timestamps taken by
the probes) less what calibration says the probes cost inside them. For a
function of tens of nanoseconds that correction is a hundred times the
function, and the probes' true cost in the server differs from their
calibration (the in-situ factor, the bursts' spread): the corrected mean
is then noise, and may come out negative. So the mean is given with a 95%
interval made of both doubts, the call-to-call variation of the raw
latencies and the probes' cost:

  low  = corrected - correction x (in-situ - 1 + doubt) - 1.96 se
  high = corrected + correction x doubt + 1.96 se

and where that interval is wider than the value (or reaches zero) the
figure is an upper bound, "< high", never a negative or zero latency.

Where the probes cannot resolve a function, CPU samples taken with the
probes off can (collectors/cpu/cpu_bursts.py): the samples with the function
on the stack (where the binary keeps frame pointers), each worth its
period, over the calls made meanwhile (the probes' calls per row times the
rows changed). That is the function's CPU with its callees'. Without
stacks only the samples in its own code count: its callees left out,
which for a leaf is nearly all of it. Its interval: the samples' Poisson
count and the calls per row's. The samples are preferred too where they
and the probes differ by no more than the probes' cost may be off by
(best_per_call)."""

from __future__ import annotations

from typing import Any

import math

from mysqlprobe.analysis import histogram as H
from mysqlprobe.probes.histogram import SUB, Histogram
from mysqlprobe.analysis.sampling import Estimate, rounded
from mysqlprobe.analysis.views import UNMEASURED_IN_SITU, Calibration
from dataclasses import dataclass

Z95 = 1.96
CORRECTED = "probe timestamps less the probes' calibrated cost; interval: the calls' spread and the probes' cost"
RAW = "probe timestamps, the probes' own cost included (--raw); interval: the calls' spread"
SAMPLED = ("CPU samples in the function's own code with the probes off, over the calls made meanwhile (callees "
           "not included); interval: the samples' count and the calls per row")
SAMPLED_STACKS = ("CPU samples with the function on the stack (its callees included) with the probes off, over the "
                  "calls made meanwhile; interval: the samples' count and the calls per row")
SAMPLED_METHODS = (SAMPLED, SAMPLED_STACKS)


@dataclass(frozen=True)
class PerCall:
    mean_ns: float | None   # best estimate, never below zero
    low_ns: float | None    # 95% interval
    high_ns: float | None
    method: str
    probe_noise_ns: float   # what the probes' cost may be off by, per call
    correction_ns: float = 0.0  # the probes' own cost taken off each call

    @property
    def resolved(self) -> bool:
        """The interval is narrower than the value: a measurement, not a bound."""
        return (self.mean_ns is not None and self.low_ns is not None and self.high_ns is not None
                and self.low_ns > 0 and self.high_ns - self.low_ns <= self.mean_ns)

    def text(self) -> str:
        if self.mean_ns is None:
            return "-"
        bound = self.high_ns if self.high_ns is not None else self.mean_ns
        if self.resolved:
            return H.format_ns(self.mean_ns)
        # a bound at or under nothing is no figure: the probes' doubt is all there is
        return f"<{H.format_ns(bound)}" if bound > 0 else "-"

    def percentile_resolved(self, value_ns: float | None) -> bool:
        """A percentile means something where the probes' doubt per call is
        below the histogram's resolution there (a quarter octave)."""
        return value_ns is not None and self.probe_noise_ns < value_ns * (2 ** (1 / SUB) - 1)

    def to_json(self) -> dict[str, Any]:
        return {"mean_ns": rounded(self.mean_ns),
                "mean_ns_ci95": None if self.low_ns is None else [rounded(self.low_ns), rounded(self.high_ns)],
                "mean_method": self.method, "mean_resolved": self.resolved}


def _spread_se(histogram: Histogram, calls: int) -> float:
    """Standard error of the mean, from the histogram (each call at its bucket's middle)."""
    buckets = histogram.buckets()
    n = sum(b.count for b in buckets)
    if n < 2 or not calls:
        return 0.0
    mids = [((b.low + b.high) / 2, b.count) for b in buckets]
    mean = sum(m * c for m, c in mids) / n
    var = sum(c * (m - mean) ** 2 for m, c in mids) / (n - 1)
    return math.sqrt(var / calls)


def per_call(calls: int, total_ns: float, raw_total_ns: float, raw_histogram: Histogram, calibration: Calibration,
             classes: set[str]) -> PerCall:
    """The mean cost of a call, its 95% interval and how it was made."""
    if not calls:
        return PerCall(None, None, None, CORRECTED, 0.0)
    raw_mean = raw_total_ns / calls
    stat = Z95 * _spread_se(raw_histogram, calls)
    if not calibration.corrected:
        return PerCall(raw_mean, max(raw_mean - stat, 0.0), raw_mean + stat, RAW, 0.0)
    corrected = total_ns / calls
    correction = max(raw_mean - corrected, 0.0)
    doubt = calibration.cost_doubt(classes)
    below = correction * (calibration.in_situ_high - 1 + doubt)
    above = correction * doubt
    low = max(corrected - below - stat, 0.0)
    # a mean below zero by more than the doubt says the calibration overrates
    # the probes here: the bound is then what their cost may be off by, never 0
    high = corrected + above + stat
    high = max(high, low) if high > 0 else above
    return PerCall(min(max(corrected, low), high), low, high, CORRECTED, max(below, above), correction)


def poisson95(n: int) -> tuple[float, float]:
    """A 95% interval for the mean of a Poisson count n (the square-root
    approximation: within a few percent of the exact one from n = 0 up)."""
    half = Z95 / 2
    return (max(math.sqrt(n) - half, 0.0) ** 2 if n else 0.0), (math.sqrt(n + 1) + half) ** 2


def sampled_per_call(cpu_ns: float, samples: int, period_ns: float, calls: Estimate, probe_noise_ns: float = 0.0,
                     method: str = SAMPLED) -> PerCall | None:
    """The mean CPU of a call from `samples` CPU samples (cpu_ns in all,
    period_ns each) over `calls` (an Estimate with its interval); None
    where no call was made or the calls have no interval."""
    if not calls or calls.value <= 0 or calls.low is None or calls.low <= 0 or calls.high is None:
        return None
    low_n, high_n = poisson95(samples)
    per_sample = cpu_ns / samples if samples else period_ns
    mean = cpu_ns / calls.value
    return PerCall(mean, low_n * per_sample / calls.high, high_n * per_sample / calls.low, method, probe_noise_ns)


MAX_SAMPLES_TO_RESOLVE = 100_000


def samples_to_resolve(calls: Estimate) -> int | None:
    """The fewest CPU samples that would make the samples' figure a mean,
    not a bound (its 95% interval narrower than itself and above zero),
    with these calls' doubt (an Estimate); None where no count would (the
    calls' own doubt is wider than that) or the calls have no interval.
    A bound's samples against it say how much longer a window would give
    the function's cost: the samples grow with the window, the doubt of
    the calls per row does not."""
    if sampled_per_call(1, 1, 1, calls) is None:
        return None

    def resolves(n: int) -> bool:  # once true, true for every larger count
        p = sampled_per_call(n, n, 1, calls)
        return p is not None and p.resolved

    fails, n = 0, 1
    while not resolves(n):
        if n >= MAX_SAMPLES_TO_RESOLVE:
            return None
        fails, n = n, min(2 * n, MAX_SAMPLES_TO_RESOLVE)
    while n - fails > 1:  # the first count that resolves, between the last that did not and n
        middle = (fails + n) // 2
        fails, n = (fails, middle) if resolves(middle) else (middle, n)
    return n


def best_per_call(probed: PerCall, sampled: PerCall | None) -> PerCall:
    """The probes' figure where it is a measurement that the samples do not
    contradict within the probes' own doubt; else the samples' where theirs
    is one; else the tighter of the two, a bound where the samples' is.

    The samples owe nothing to the probes' cost, but see CPU only; the
    probes see the whole call, but a hit in a server costs 1.1-1.9x its
    calibration, and the in-situ factor that says so is averaged over every
    probe. So where the two differ by no more than the probes' cost could be
    off by (the correction, times up to UNMEASURED_IN_SITU - 1), the
    difference is the probes' and the samples are taken (bench/PER_CALL.md:
    page_cur_insert_rec_low, about 110 ns, came out 512-535 ns [173, 611]
    from the probes with a 500-ns correction); where they differ by more,
    it is time off the CPU that only the probes see, and theirs stands: a
    wait on a lock or for I/O (the kernel leaves the waits for a CPU out of
    the probes' times: engine.cpu_waits_left_out; under more runnable
    threads than CPUs they made a 285-ns lookup average 2.7 us, bench/PER_CALL_OLTP.md)."""
    if sampled is None or sampled.high_ns is None or sampled.mean_ns is None or probed.mean_ns is None:
        return probed
    doubt = probed.correction_ns * (UNMEASURED_IN_SITU - 1)
    explained = probed.correction_ns > probed.mean_ns or abs(probed.mean_ns - sampled.mean_ns) <= doubt
    if probed.resolved and not explained:
        return probed
    if sampled.resolved or probed.high_ns is None or sampled.high_ns < probed.high_ns:
        return sampled
    return probed


def window_total(corrected_ns: float, pc: PerCall, calls: float | None) -> tuple[float, bool]:
    """The time a stage took, as the report shows it, and whether it is a
    bound: the probes' corrected total where the mean per call is theirs
    and a measurement; the mean times the calls where it is the CPU
    samples'; the bound times the calls where the mean is a bound (the
    probes' doubt per call outweighs it). Never below zero: a probe cost
    calibrated above the one in situ takes more off than the calls held."""
    if pc.mean_ns is None or not calls:
        return max(corrected_ns, 0.0), False
    if not pc.resolved:
        return (pc.high_ns if pc.high_ns is not None else pc.mean_ns) * calls, True
    if pc.method in SAMPLED_METHODS:
        return pc.mean_ns * calls, False
    return max(corrected_ns, 0.0), False
