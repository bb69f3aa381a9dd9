"""The plan cache: a second start on the same build, stages and options
takes its probes from the cache and reads no symbol table; anything else
plans afresh, and a cache file others could have written is not read."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from mysqlprobe import catalog
from mysqlprobe.caches import PLAN_CACHE_ENTRIES, PlanCache
from mysqlprobe.collectors.target.elf import read_build_id, read_elf
from mysqlprobe.collectors.target.symbols import load_binary
from mysqlprobe.recorder.plan import plan_cached, plan_probes

STAGES = list(catalog.INSERT_PROFILE)


def planner(path, stages=STAGES, calls=None):
    def make():
        if calls is not None:
            calls.append(path)
        binary = load_binary(str(path))
        return binary, plan_probes(binary, stages, [])
    return make


def test_the_second_start_on_a_build_reads_no_symbols(mysql_fixtures, tmp_path):
    path, cache, calls = str(mysql_fixtures["5.7"]), PlanCache(tmp_path), []
    binary, plan = plan_cached(path, "/usr/sbin/mysqld", cache, (STAGES, [], None), planner(path, calls=calls))
    assert calls == [path] and not plan.cached and binary.symbols.released
    again, cached = plan_cached(path, "/usr/sbin/mysqld", cache, (STAGES, [], None), planner(path, calls=calls))
    assert calls == [path] and cached.cached                  # make() not called: no ELF symbols read
    assert [(s.stage, s.symbol.offset, s.cookie) for s in cached.specs] == \
        [(s.stage, s.symbol.offset, s.cookie) for s in plan.specs]
    assert again.server == binary.server and again.image.build_id == read_build_id(path)
    # what perf's unwinding is chosen from comes along, though the table does not
    assert again.image.frame_pointer_share == read_elf(path).frame_pointer_share


def test_another_process_of_the_build_gets_its_own_path(mysql_fixtures, tmp_path):
    original = str(mysql_fixtures["5.7"])
    copy = tmp_path / "copy" / "mysqld"
    copy.parent.mkdir()
    shutil.copy(original, copy)
    cache = PlanCache(tmp_path / "root")
    plan_cached(original, original, cache, (STAGES, [], None), planner(original))
    binary, plan = plan_cached(str(copy), "/srv/mysqld", cache, (STAGES, [], None), planner(copy))
    assert plan.cached and binary.path == binary.image.path == str(copy) and binary.display_path == "/srv/mysqld"


def test_other_stages_options_or_builds_plan_afresh(mysql_fixtures, tmp_path):
    path, cache, calls = str(mysql_fixtures["5.7"]), PlanCache(tmp_path), []
    plan_cached(path, path, cache, (STAGES, [], None), planner(path, calls=calls))
    _, fewer = plan_cached(path, path, cache, (STAGES[:2], [], None), planner(path, STAGES[:2], calls))
    _, probed = plan_cached(path, path, cache, (STAGES, ["row_ins_clust*"], None), planner(path, calls=calls))
    other = str(mysql_fixtures["8.0"])
    _, build = plan_cached(other, other, cache, (STAGES, [], None), planner(other, calls=calls))
    assert len(calls) == 4 and not (fewer.cached or probed.cached or build.cached)
    assert len(fewer.specs) < len(plan_cached(path, path, cache, (STAGES, [], None), planner(path))[1].specs)


def test_a_stripped_binary_is_planned_each_time(mysql_fixtures, tmp_path):
    stripped = tmp_path / "mysqld"
    shutil.copy(mysql_fixtures["5.7"], stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    cache, calls = PlanCache(tmp_path / "root"), []
    for _ in range(2):
        binary, plan = plan_cached(str(stripped), str(stripped), cache, (STAGES, [], None),
                                   planner(stripped, calls=calls))
        assert not plan.cached and not binary.image.has_symtab
    assert len(calls) == 2 and not list((tmp_path / "root" / "plans").glob("*.pickle"))


def test_a_cache_file_others_may_write_is_not_read(mysql_fixtures, tmp_path):
    path, cache = str(mysql_fixtures["5.7"]), PlanCache(tmp_path)
    plan_cached(path, path, cache, (STAGES, [], None), planner(path))
    (kept,) = (tmp_path / "plans").glob("*.pickle")
    assert oct(kept.stat().st_mode & 0o777) == "0o600" and oct((tmp_path / "plans").stat().st_mode & 0o777) == "0o700"
    kept.chmod(0o666)
    _, plan = plan_cached(path, path, cache, (STAGES, [], None), planner(path))
    assert not plan.cached
    kept.write_bytes(b"not a pickle")  # damaged: planned afresh, and written again
    kept.chmod(0o600)
    _, plan = plan_cached(path, path, cache, (STAGES, [], None), planner(path))
    assert not plan.cached
    _, plan = plan_cached(path, path, cache, (STAGES, [], None), planner(path))
    assert plan.cached


def test_only_the_newest_plans_are_kept(tmp_path):
    cache = PlanCache(tmp_path)
    for i in range(PLAN_CACHE_ENTRIES + 5):
        assert cache.save(f"{i:032x}", {"plan": i})
        os.utime(cache.dir / f"{i:032x}.pickle", (i, i))  # the order they were written in
    kept = sorted(int(p.stem, 16) for p in cache.dir.glob("*.pickle"))
    assert kept == list(range(5, PLAN_CACHE_ENTRIES + 5))


@pytest.mark.parametrize("parts", [(STAGES, [], None), (STAGES, [], "/x.debug")])
def test_the_key_holds_the_build_and_every_part(parts):
    cache = PlanCache()
    assert cache.key("abc", *parts) == cache.key("abc", *parts)
    assert cache.key("abd", *parts) != cache.key("abc", *parts)
    assert cache.key("abc", *parts, 1) != cache.key("abc", *parts)
