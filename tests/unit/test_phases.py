"""The recorder's phase order, as the collectors declare it (collectors/base.py
Phases): what each order must keep, whichever numbers give it."""

from mysqlprobe.collectors.cpu.cpu_bursts import CpuBurstCollector
from mysqlprobe.collectors.cpu.cpu_sampler import CpuBurstSampler, CpuProfileCollector
from mysqlprobe.collectors.cpu.perf import PerfCollector
from mysqlprobe.collectors.kernel.io import IoCollector
from mysqlprobe.collectors.kernel.offcpu import OffCpuCollector
from mysqlprobe.collectors.kernel.process import ProcessCollector
from mysqlprobe.collectors.perfschema.collector import PerfSchemaCollector
from mysqlprobe.collectors.uprobes.calibration import CalibrationCollector
from mysqlprobe.collectors.uprobes.latency import LatencyCollector

CLASSES = [CpuBurstSampler, CpuProfileCollector, IoCollector, OffCpuCollector, ProcessCollector,
           PerfSchemaCollector, CalibrationCollector, LatencyCollector]


def order(phase: str, classes=CLASSES) -> list[str]:
    return [c.name for c in sorted(classes, key=lambda c: getattr(c.phases, phase))]


def before(names: list[str], first: str, then: str) -> bool:
    return names.index(first) < names.index(then)


def test_the_probes_start_last_and_the_calibration_first():
    start = order("start")
    assert start[-1] == LatencyCollector.name and start[0] == CalibrationCollector.name


def test_the_calibration_prepares_between_the_samplers_and_the_probes():
    prepare = order("prepare")
    for bpf in (OffCpuCollector.name, IoCollector.name):
        assert before(prepare, bpf, CpuProfileCollector.name)     # loaded while perf starts
    assert before(prepare, CpuProfileCollector.name, CalibrationCollector.name)
    assert before(prepare, CalibrationCollector.name, LatencyCollector.name)


def test_names_are_collected_before_the_stacks_they_name():
    collect = order("collect")
    assert collect[:2] == [PerfSchemaCollector.name, ProcessCollector.name]


def test_the_bursts_perf_outlives_the_windows():
    for classes in (CLASSES, [CpuBurstCollector, PerfCollector]):
        assert before(order("begin", classes), "cpu_bursts", "cpu_profile")
        assert before(order("collect", classes), "cpu_profile", "cpu_bursts")


def test_either_sampler_takes_the_same_places():
    assert CpuProfileCollector.phases == PerfCollector.phases
    assert CpuBurstSampler.phases == CpuBurstCollector.phases


def test_no_two_collectors_share_a_place():
    for phase in ("begin", "prepare", "start", "collect"):
        places = [getattr(c.phases, phase) for c in CLASSES]
        assert len(set(places)) == len(places), phase


def test_a_capture_names_every_optional_collector_a_run_left_out():
    """Each collector declares whether a run may leave it out; a capture
    without one says so in its section, and a collector every run has
    (probes, calibration, /proc) never reads "not requested"."""
    from mysqlprobe.collectors.base import optional_sections
    from mysqlprobe.recorder.recorder import assemble
    optional = optional_sections()
    assert {c.name for c in (PerfCollector, CpuBurstCollector, *CLASSES) if c.optional} == set(optional)
    assert not {LatencyCollector.name, CalibrationCollector.name, ProcessCollector.name} & set(optional)
    head = {"target": {"pid": 1, "binary": "/x"}, "window": {"duration_s": 1.0}}
    doc = assemble(["mysqlprobe"], head, [], {}, []).doc
    assert all(doc[name] == {"status": "not requested"} for name in optional)
