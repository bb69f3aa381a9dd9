"""P_S summaries of instruments switched off in the quiet phases are
scaled to the whole window; those that stayed on are not."""

import pytest

from mysqlprobe.analysis import ps_figures
from mysqlprobe.analysis.views import PerfSchema, Sampling, Window


def _views(doc):
    return (PerfSchema.of(doc.get("perf_schema")), Window.of(doc["window"]),
            Sampling.of(doc.get("sampling")))


def quiet_scale(doc):
    return ps_figures.quiet_scale(*_views(doc))


def ps_deltas(doc):
    return ps_figures.ps_deltas(*_views(doc))


def capture(quieted: dict | None, rows=1000, quiet_rows=480):
    ps = {"status": "collected", "deltas": {
        "stages": [{"name": "stage/sql/update", "count": 600, "timer_ps": 6_000_000},
                   {"name": "stage/sql/kept on", "count": 1000, "timer_ps": 9_000_000}],
        "thread_stages": [{"name": "12 stage/sql/update", "count": 60, "timer_ps": 600}],
        "waits": [{"name": "wait/io/file/innodb/innodb_log_file", "count": 10, "timer_ps": 100}],
        "tables": [{"name": "sbtest.sbtest1", "count": 30, "timer_ps": 300, "writes": 30, "write_timer_ps": 300}],
        "digests": [{"name": "INSERT INTO t VALUES (?)", "count": 1000, "timer_ps": 5, "rows_affected": 1000,
                     "rows_examined": 0}],
        "status": {"Innodb_rows_inserted": 1000, "Handler_write": 1000, "Handler_update": 200,
                   "Handler_delete": 0}}}
    if quieted is not None:
        ps["quieted"] = quieted
    return {"perf_schema": ps, "window": {"duration_s": 10.0, "rows_changed": rows,
                                          "rows_counter": "Handler_write+Handler_update+Handler_delete"},
            "sampling": {"mode": "sampled", "quiet_rows": quiet_rows, "quiet_s": 4.0}}


QUIET = {"consumers": ["events_stages_current"], "instruments": ["stage/sql/update"], "quiet_s": 5.0}


def test_quieted_stages_are_scaled_by_the_rows_outside_the_quiet_phases():
    doc = capture(QUIET)
    # rows changed while the summaries were read (a little more than the window's 1000)
    assert quiet_scale(doc) == pytest.approx(1200 / 720)
    doc["perf_schema"]["own_rows_changed"] = 100          # its quiet phases' setup updates
    assert quiet_scale(doc) == pytest.approx(1100 / 620)
    del doc["perf_schema"]["own_rows_changed"]
    d = ps_deltas(doc)
    update, kept = d["stages"]
    assert (update["count"], update["timer_ps"], update["scaled_by"]) == (1000, 10_000_000, 1.6667)
    assert kept == doc["perf_schema"]["deltas"]["stages"][1]          # on before the window: as it was
    assert d["thread_stages"][0]["count"] == 100
    assert d["waits"] == doc["perf_schema"]["deltas"]["waits"]
    assert d["tables"] == doc["perf_schema"]["deltas"]["tables"] and d["digests"][0]["count"] == 1000
    assert d["status"] == doc["perf_schema"]["deltas"]["status"]
    del doc["perf_schema"]["deltas"]["status"]["Handler_delete"]   # an older capture: the window's rows
    assert quiet_scale(doc) == pytest.approx(1000 / 520)


def test_without_rows_the_time_scales():
    doc = capture(QUIET, rows=None)
    doc["perf_schema"]["deltas"]["status"] = {}
    assert quiet_scale(doc) == pytest.approx(10.0 / 5.0)


def test_table_and_statement_instruments_scale_their_summaries():
    doc = capture({**QUIET, "instruments": ["wait/io/table/sql/handler", "statement/sql/insert"]})
    d = ps_deltas(doc)
    assert d["tables"][0]["writes"] == 50 and d["digests"][0]["rows_affected"] == 1667
    assert d["stages"] == doc["perf_schema"]["deltas"]["stages"]


def test_nothing_quieted_leaves_the_deltas_alone():
    doc = capture(None)
    assert quiet_scale(doc) is None and ps_deltas(doc) is doc["perf_schema"]["deltas"]
    assert ps_deltas({"window": {"duration_s": 1.0}}) == {}


def test_a_quiet_phase_keeps_the_statements_on():
    # a statement that ends in a quiet phase must still reach the history the window reads
    from mysqlprobe.collectors.perfschema.settings import PerfSchema
    ps = PerfSchema(conn=None, saved_consumers={"events_statements_history_long": "NO",
                                                "events_stages_history_long": "NO",
                                                "events_stages_current": "NO"},
                    saved_instruments={"statement/sql/insert_select": ("NO", "NO"),
                                       "stage/sql/Sending data": ("NO", "NO"),
                                       "stage/sql/init": ("YES", "NO")})
    consumers, instruments = ps.quieted_setup()
    assert consumers == ["events_stages_current", "events_stages_history_long"]
    assert instruments == ["stage/sql/Sending data"]


def test_a_stage_is_not_scaled_past_what_its_threads_had():
    """One statement's 'Sending data' ran across the quiet phases and was
    summed whole when it ended: scaled by the rows outside them (x1.98) it
    read 23.2 s for one thread in an 11.8-s window. Kept as P_S measured it."""
    from mysqlprobe.analysis.ps_figures import ps_deltas
    from mysqlprobe.analysis.views import PerfSchema, Sampling, Window
    ps = PerfSchema.of({"status": "collected", "quieted": {"instruments": ["stage/sql/Sending data",
                                                                          "stage/sql/init"], "quiet_s": 5.9},
                        "stages": [{"thread_id": 7, "statement_event_id": 1, "event_name": "stage/sql/Sending data"}],
                        "deltas": {"status": {}, "stages": [
                            {"name": "stage/sql/Sending data", "count": 1, "timer_ps": int(11.7e12)},
                            {"name": "stage/sql/init", "count": 10, "timer_ps": int(1e9)}]}})
    window = Window.of({"duration_s": 11.8})
    out = ps_deltas(ps, window, Sampling.of({"mode": "sampled"}), threads=2)
    sending, init = out["stages"]
    assert sending["timer_ps"] == int(11.7e12) and sending["scaled_by"] is None and "not_scaled" in sending
    assert init["scaled_by"] == pytest.approx(11.8 / 5.9, rel=1e-3) and init["timer_ps"] == round(1e9 * 2)
