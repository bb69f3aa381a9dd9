"""mysqlprobe.records stands in for dataclasses on the start's path: each
behaviour the project relies on, side by side with a dataclass's."""

import copy
import dataclasses
import pickle

import pytest

from mysqlprobe.records import FrozenRecordError, as_dict, field, record, replace


@record
class Plain:
    """A mutable record."""

    name: str
    hits: int = 0
    seen: list = field(default_factory=list)
    note: str = field(default="", repr=False)


@dataclasses.dataclass
class PlainDataclass:
    name: str
    hits: int = 0
    seen: list = dataclasses.field(default_factory=list)
    note: str = dataclasses.field(default="", repr=False)


@record(frozen=True)
class Point:
    """A frozen record."""

    x: int
    y: int = 0


@record(frozen=True, slots=True)
class Symbol:
    """A frozen record with slots."""

    name: str
    address: int


@record
class Derived:
    """A record that completes itself."""

    a: int
    twice: int = 0

    def __post_init__(self):
        self.twice = 2 * self.a


def test_init_defaults_and_factories_as_a_dataclass():
    r, d = Plain("a"), PlainDataclass("a")
    assert (r.name, r.hits, r.seen, r.note) == (d.name, d.hits, d.seen, d.note)
    assert Plain("a").seen is not Plain("a").seen  # a new list each
    assert Plain("b", 3, [1], note="n").seen == [1] and Plain(name="b", hits=2).hits == 2
    assert Plain.hits == 0  # the default stays a class attribute
    with pytest.raises(TypeError):
        Plain()
    with pytest.raises(TypeError):
        Plain("a", unknown=1)


def test_repr_and_eq_as_a_dataclass():
    assert repr(Plain("a", 1)) == repr(PlainDataclass("a", 1)).replace("PlainDataclass", "Plain")
    assert Plain("a", 1) == Plain("a", 1) and Plain("a", 1) != Plain("a", 2)
    assert Plain("a") != PlainDataclass("a")  # another class is never equal
    with pytest.raises(TypeError):
        hash(Plain("a"))  # mutable and compared by value


def test_frozen_refuses_assignment_and_hashes_by_fields():
    p = Point(1, 2)
    with pytest.raises(FrozenRecordError):
        p.x = 3
    with pytest.raises(AttributeError):
        del p.y
    assert hash(Point(1, 2)) == hash(Point(1, 2)) and {Point(1, 2): "a"}[Point(1, 2)] == "a"


def test_slots_hold_no_dict_and_pickle_round_trips():
    s = Symbol("row_insert_for_mysql", 0x1000)
    assert not hasattr(s, "__dict__") and Symbol.__slots__ == ("name", "address")
    for again in (pickle.loads(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)), copy.deepcopy(s)):
        assert again == s and again is not s
    assert pickle.loads(pickle.dumps(Point(1, 2))) == Point(1, 2)
    assert pickle.loads(pickle.dumps(Plain("a", 2, [3]))) == Plain("a", 2, [3])


def test_post_init_runs_after_the_fields():
    assert Derived(4).twice == 8


def test_replace_and_as_dict():
    p = Point(1, 2)
    assert replace(p, y=5) == Point(1, 5) and p == Point(1, 2)
    assert as_dict(Plain("a", 1)) == {"name": "a", "hits": 1, "seen": [], "note": ""}
    assert as_dict(Plain("a", 1)) == dataclasses.asdict(PlainDataclass("a", 1))


def test_eq_takes_an_element_as_equal_to_itself_as_a_dataclass_does():
    nan = float("nan")
    Compared = dataclasses.make_dataclass("Compared", ["x"])
    assert Compared(nan) == Compared(nan)  # the same NaN object in both
    assert Point(nan, 1) == Point(nan, 1) and Point(nan, 1) != Point(float("nan"), 1)


def test_slots_keep_the_class_name_and_qualname():
    assert Symbol.__name__ == "Symbol" and Symbol.__qualname__ == "Symbol"
    assert repr(Symbol("f", 1)) == "Symbol(name='f', address=1)"
