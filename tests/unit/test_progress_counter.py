"""A counter read from the target's memory as its progress
(--progress-counter): the variable found among the object symbols, its
address in the known_cost process, its value as the program wrote it, and a
wrong name told before anything is attached."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from mysqlprobe.collectors.target.elf import data_symbol, read_elf
from mysqlprobe.collectors.uprobes.progress import MemoryCounter, counter_symbol
from mysqlprobe.errors import UsageError
from test_cli import _one_line, mysqlprobe


def test_a_variable_is_found_and_a_function_is_not_one(known_cost_binary):
    address, size = data_symbol(str(known_cost_binary), "loop_calls")
    assert size == 8 and address
    assert data_symbol(str(known_cost_binary), "cost_10ns") is None     # a function
    assert data_symbol(str(known_cost_binary), "calls") is None         # only a tail of loop_calls' name
    with pytest.raises(UsageError, match="no such variable"):
        counter_symbol(str(known_cost_binary), "known_cost", "no_such_counter")


def test_a_stripped_binarys_variable_is_in_its_debug_file(known_cost_binary, tmp_path):
    debug, stripped = tmp_path / "known_cost.debug", tmp_path / "known_cost"
    subprocess.run(["objcopy", "--only-keep-debug", str(known_cost_binary), str(debug)], check=True)
    subprocess.run(["strip", "-o", str(stripped), str(known_cost_binary)], check=True)
    assert data_symbol(str(stripped), "loop_calls") is None
    assert data_symbol(str(debug), "loop_calls") == data_symbol(str(known_cost_binary), "loop_calls")


def test_the_counter_reads_what_the_process_counted(known_cost, known_cost_binary):
    symbol = counter_symbol(f"/proc/{known_cost.pid}/exe", str(known_cost_binary), "loop_calls")
    counter = MemoryCounter(known_cost.pid, str(known_cost_binary), read_elf(str(known_cost_binary)).segments,
                            "loop_calls", symbol)
    try:
        assert counter.read() == 0 and counter.label == "memory:loop_calls"
        for _ in range(2):
            known_cost.stdin.write("loop cost_10ns 20\n")
            known_cost.stdin.flush()
            json.loads(known_cost.stdout.readline())
        # the loop's own count, call by call: the PIE's load address applied right
        total = counter.read()
        known_cost.stdin.write("loop cost_10ns 20\n")
        known_cost.stdin.flush()
        calls = json.loads(known_cost.stdout.readline())["calls"]
        assert counter.read() - total == calls
    finally:
        counter.close()


def test_a_wrong_name_is_one_line_before_anything_is_attached(known_cost):
    code, _, err = mysqlprobe("-p", known_cost.pid, "--probe", "cost_10ns", "--no-ps", "-d", "1",
                              "--progress-counter", "no_such_counter")
    exe = os.readlink(f"/proc/{known_cost.pid}/exe")
    assert code == 2
    assert _one_line(err) == f"mysqlprobe: --progress-counter no_such_counter: no such variable in {exe}'s symbols"
