"""Whether a frame carries the AMQP types the specification gives its fields, at every depth, sans-I/O.

A performative's fields, and the fields of every composite value inside it (a source, a target, an error, a
delivery state and the outcome or error it holds), are held to the types :mod:`.amqp_types` gives them: a
``uint`` must be encoded as a uint (not a ulong, not a string), a ``symbol`` field that is ``multiple`` as a
symbol or an array of symbols (1.6.5; a list is neither), a ``fields`` map must have symbol keys (2.8.2),
a field typed by an archetype (``delivery-state``, ``outcome``, ``error``, ``source``, ``target``) must be a
described value of a composite type that provides it, a mandatory field must not be null, and a restricted type
with choices (a settle mode, a terminus durability or expiry policy, a SASL code) must hold one of them.

Values are decoded by ``proton.Data`` (its ``get_object`` keeps each AMQP type as a Python class: ``uint``,
``symbol``, ``Array``, ``Described``); nothing here decodes bytes by hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

import proton
from proton import UNDESCRIBED, Array, Data, Described, symbol

from .amqp_types import ALLOWED_VALUES, BY_NAME, PERFORMATIVES, SASL_PERFORMATIVES, DescribedType, FieldSpec, type_of
from .frames import Frame

# The composite types that provide each archetype a field may require (3.4, 3.5, 4.5.4: declared provides
# delivery-state and outcome, 4.5.5 transactional-state delivery-state, 4.5.1 coordinator target).
ARCHETYPES: dict[str, tuple[str, ...]] = {
    "delivery-state": ("received", "accepted", "rejected", "released", "modified", "declared",
                       "transactional-state"),
    "outcome": ("accepted", "rejected", "released", "modified", "declared"),
    "error": ("error",), "source": ("source",), "target": ("target", "coordinator"),
}
# The decoded Python classes each primitive field type allows (binary decodes as memoryview). ``address`` is
# address-string (3.5.1); a message-id may be a ulong, uuid, binary or string (3.2.11 to 3.2.14).
PRIMITIVES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,), "ubyte": (proton.ubyte,), "ushort": (proton.ushort,), "uint": (proton.uint,),
    "ulong": (proton.ulong,), "string": (str,), "symbol": (symbol,), "binary": (memoryview, bytes), "map": (dict,),
    "fields": (dict,), "filter-set": (dict,), "timestamp": (proton.timestamp,), "address": (str,),
    "message-id": (proton.ulong, UUID, memoryview, bytes, str),
}
# The AMQP name of each class proton.Data decodes to (1.6), for the problems' text.
_TYPE_NAMES: dict[type, str] = {
    type(None): "null", bool: "boolean", int: "long", float: "double", UUID: "uuid", memoryview: "binary",
    bytes: "binary", str: "string", list: "list", dict: "map", Array: "array", Described: "described",
    **{getattr(proton, name): name for name in ("ubyte", "ushort", "uint", "ulong", "byte", "short", "char",
                                                "timestamp", "symbol", "decimal32", "decimal64", "decimal128")},
    proton.int32: "int", proton.float32: "float",
}


def frame_problems(frame: Frame) -> list[str]:
    """Why ``frame`` (a performative, AMQP or SASL) does not carry the types its fields are given, one line per
    problem, each naming the field by its path (``attach.source.capabilities``), what it is, what the
    specification types it and the section; [] when every field is well typed, and for a protocol header, a
    heartbeat or anything that is not a decoded performative."""
    if frame.performative not in PERFORMATIVES and frame.performative not in SASL_PERFORMATIVES:
        return []
    if frame.decoded is not None:  # its splitter kept what it decoded (FrameSplitter(keep_decoded=True))
        return value_problems(frame.decoded)
    return body_problems(frame.raw[frame.raw[4] * 4:])


def body_problems(body: bytes) -> list[str]:
    """:func:`frame_problems` for a frame body (the bytes after the frame header): [] for an empty body; one
    problem when proton cannot decode it or it is not a described list of a known composite type."""
    if not body:
        return []
    data = Data()
    try:
        data.decode(body)
        data.rewind()
        data.next()
        value = data.get_object()
    except Exception as exc:  # proton raises DataException and friends on bad input
        return [f"the frame body does not decode: {type(exc).__name__}: {exc}"]
    return value_problems(value)


def value_problems(value: Any) -> list[str]:
    """:func:`body_problems` of a body ``proton.Data`` has decoded (its ``get_object()``): one problem when it is
    not a described value of a known composite type."""
    kind = type_of(value.descriptor) if isinstance(value, Described) else None
    if kind is None:
        return [f"the frame body is {describe(value)}, not a performative"]
    return composite_problems(value, kind, kind.name)


def composite_problems(value: Described, kind: DescribedType, path: str) -> list[str]:
    """Why the described value ``value`` of composite type ``kind`` does not carry the types ``kind``'s fields
    are given (``path`` names it in the lines); [] when it does. Its list may be shorter than its fields (the
    rest are null, 1.4)."""
    items = value.value
    if not isinstance(items, list):
        return [f"{path} is described by {kind.name}'s descriptor but holds {describe(items)}, not a list "
                f"({kind.section})"]
    found: list[str] = []
    for spec, item in zip(kind.specs, [*items, *[None] * (len(kind.specs) - len(items))], strict=False):
        found += _field_problems(item, spec, kind, f"{path}.{spec.name}")
    return found


def _field_problems(value: Any, spec: FieldSpec, owner: DescribedType, path: str) -> list[str]:
    where = f"({owner.section})"
    if value is None:
        return [f"{path} is mandatory but null {where}"] if spec.mandatory else []
    if spec.type == "any":
        return []
    if spec.multiple and isinstance(value, Array):
        element = _element_type(value)
        if element != spec.type:
            return [f"{path} is an array of {element}, not of {spec.type} {where}"]
        return [line for index, item in enumerate(value.elements)
                for line in _value_problems(item, spec, owner, f"{path}[{index}]", where)]
    if spec.multiple and type(value) not in PRIMITIVES.get(spec.type, (type(value),)):
        return [f"{path} is {describe(value)}, not {spec.type} or an array of {spec.type} (multiple, 1.6.5) "
                f"{where}"]
    return _value_problems(value, spec, owner, path, where)


def _value_problems(value: Any, spec: FieldSpec, owner: DescribedType, path: str, where: str) -> list[str]:
    if spec.type in ARCHETYPES:
        return _archetype_problems(value, spec.type, path, where)
    if type(value) not in PRIMITIVES[spec.type]:
        return [f"{path} is {describe(value)}, not {spec.type} {where}"]
    if spec.type in ("fields", "filter-set"):
        keys = [key for key in value if type(key) is not symbol]
        if keys:
            return [f"{path} has {describe(keys[0])} key {keys[0]!r}: a {spec.type} map's keys are symbols {where}"]
    allowed = ALLOWED_VALUES.get((owner.name, spec.name))
    if allowed is not None and value not in allowed:
        choices = ", ".join(sorted(map(str, allowed)))
        shown = str(value) if isinstance(value, str) else int(value)
        return [f"{path} is {describe(value)} {shown}, not one of its choices ({choices}) {where}"]
    return []


def _archetype_problems(value: Any, archetype: str, path: str, where: str) -> list[str]:
    providers = ARCHETYPES[archetype]
    kind = type_of(value.descriptor) if isinstance(value, Described) else None
    if kind is None or kind.name not in providers:
        return [f"{path} is {describe(value)}, not a {archetype} ({', '.join(providers)}) {where}"]
    return composite_problems(value, kind, path)


def _element_type(array: Array) -> str:
    """The AMQP type of an array's elements, by its constructor (described arrays: "described")."""
    if array.descriptor is not UNDESCRIBED:
        return "described"
    name = Data.type_names.get(array.type, str(array.type))
    return "boolean" if name == "bool" else name


def describe(value: Any) -> str:
    """What a decoded value is, as the AMQP type name (a described value by its composite type or descriptor)."""
    if isinstance(value, Described):
        kind = type_of(value.descriptor)
        return f"a described {kind.name}" if kind is not None else f"a described value ({value.descriptor!r})"
    if isinstance(value, Array):
        return f"an array of {_element_type(value)}"
    name = _TYPE_NAMES.get(type(value), type(value).__name__)
    return f"an {name}" if name in ("array", "int") else f"a {name}"


def field_path_problem(path: str) -> str | None:
    """Why ``path`` names no field of a frame (None when it names one): a performative's name, then field names
    down through the composite types each field's type allows (``attach.source.capabilities``,
    ``disposition.state.error.info``: a state may be a rejected, whose error is an error). The problem lists what
    could come next."""
    first, *rest = path.split(".")
    if first not in PERFORMATIVES and first not in SASL_PERFORMATIVES:
        names = ", ".join(sorted(PERFORMATIVES | SASL_PERFORMATIVES))
        return f"{path!r} does not begin with a performative ({names})"
    kinds = [first]
    for depth, name in enumerate(rest, start=1):
        specs = [spec for kind in kinds for spec in BY_NAME[kind].specs if spec.name == name]
        if not specs:
            known = ", ".join(dict.fromkeys(spec.name for kind in kinds for spec in BY_NAME[kind].specs))
            return f"{'.'.join([first, *rest[:depth - 1]])} has no field {name!r} (it has: {known or 'none'})"
        kinds = [provider for spec in specs for provider in ARCHETYPES.get(spec.type, ())]
        if not kinds and depth < len(rest):
            return f"{'.'.join([first, *rest[:depth]])} is a {specs[0].type}, which has no fields"
    return None


def broker_frame_problems(frames: Iterable[Frame]) -> list[str]:
    """:func:`frame_problems` of every frame the broker sent (direction ``in``) among ``frames``, each distinct
    line once, in the order first seen."""
    seen: dict[str, None] = {}
    for frame in frames:
        if frame.direction == "in":
            seen.update(dict.fromkeys(frame_problems(frame)))
    return list(seen)
