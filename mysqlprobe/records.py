"""Data classes for the modules a recording imports before its probes are
attached.

dataclasses.dataclass compiles four to six methods of each class from
source: 0.8-1.2 ms a class here, 51 ms for the 50 classes on that path,
and its own import brings inspect, ast and dis (14 ms more), all before
the first probe is attached. `record` compiles __init__ alone, so that
instances are made as fast as a dataclass's; equality, repr, hash and
the frozen guard are shared functions over the class's field names.

What it does as dataclass does: fields from the class's annotations, in
order (ClassVar ones left out), defaults, field(default=,
default_factory=, repr=), __post_init__, eq (same class, equal fields),
a hash from the fields when frozen (none when not), frozen instances that
refuse assignment, slots. No inheritance between records, no ordering.
replace() and as_dict() stand for dataclasses.replace and asdict (one
level)."""

from __future__ import annotations

MISSING = object()


class FrozenRecordError(AttributeError):
    """An assignment to a field of a frozen record."""


class Field:
    """A field's default (or the function that makes one) and whether repr shows it."""

    __slots__ = ("default", "default_factory", "repr")

    def __init__(self, default=MISSING, default_factory=MISSING, repr: bool = True):
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field has a default or a default_factory, not both")
        self.default, self.default_factory, self.repr = default, default_factory, repr


def field(*, default=MISSING, default_factory=MISSING, repr: bool = True):
    return Field(default, default_factory, repr)


def record(cls=None, /, *, frozen: bool = False, slots: bool = False):
    """@record, @record(frozen=True) or @record(frozen=True, slots=True): see the module's text."""
    def wrap(cls):
        return _make(cls, frozen, slots)
    return wrap if cls is None else wrap(cls)


def _fields(cls) -> list[tuple[str, Field]]:
    found = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        found.append((name, value if isinstance(value, Field) else Field(default=value)))
    return found


def _init_source(fields: list[tuple[str, Field]], frozen: bool, post_init: bool) -> tuple[str, dict]:
    params, body, names = [], [], {"MISSING": MISSING, "_set": object.__setattr__}
    for i, (name, f) in enumerate(fields):
        value = name
        if f.default_factory is not MISSING:
            names[f"_factory_{i}"] = f.default_factory
            params.append(f"{name}=MISSING")
            value = f"_factory_{i}() if {name} is MISSING else {name}"
        elif f.default is not MISSING:
            names[f"_default_{i}"] = f.default
            params.append(f"{name}=_default_{i}")
        else:
            params.append(name)
        body.append(f"_set(self, {name!r}, {value})" if frozen else f"self.{name} = {value}")
    if post_init:
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n    " + "\n    ".join(body or ["pass"])
    return source, names


def _make(cls, frozen: bool, slots: bool):
    fields = _fields(cls)
    names = tuple(name for name, _ in fields)
    if slots:
        body = {k: v for k, v in cls.__dict__.items() if k not in names and k not in ("__dict__", "__weakref__")}
        body["__slots__"] = names
        body["__qualname__"] = cls.__qualname__  # type() drops it from the class's dict
        cls = type(cls)(cls.__name__, cls.__bases__, body)
    else:
        for name, f in fields:  # a default stays as the class's attribute, as with dataclass
            if isinstance(cls.__dict__.get(name), Field):
                if f.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
    source, scope = _init_source(fields, frozen, hasattr(cls, "__post_init__"))
    exec(source, scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    shown = tuple(name for name, f in fields if f.repr)

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        # as tuples, like a dataclass's: an element is equal to itself (a NaN too)
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    methods = {"__init__": init, "__repr__": __repr__, "__eq__": __eq__, "__match_args__": names,
               "__record_fields__": names}
    if frozen:
        def __setattr__(self, name, value):
            raise FrozenRecordError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")

        def __delattr__(self, name):
            raise FrozenRecordError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")

        def __hash__(self) -> int:
            return hash(tuple(getattr(self, n) for n in names))

        methods.update(__setattr__=__setattr__, __delattr__=__delattr__, __hash__=__hash__)
        if slots:  # unpickling sets the slots one by one, past the guard
            def __setstate__(self, state):
                for name, value in (state[1] if isinstance(state, tuple) else state).items():
                    object.__setattr__(self, name, value)
            methods["__setstate__"] = __setstate__
    else:
        methods["__hash__"] = None  # mutable and compared by value: unhashable, as a dataclass
    for name, method in methods.items():
        if name != "__init__" and cls.__dict__.get(name) is not None:
            continue  # the class's own
        if callable(method):
            method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    return cls


def replace(obj, **changes):
    """A copy of a record with some fields changed (dataclasses.replace)."""
    return type(obj)(**{**as_dict(obj), **changes})


def as_dict(obj) -> dict:
    """A record's fields by name, one level (values are not converted)."""
    return {name: getattr(obj, name) for name in type(obj).__record_fields__}
