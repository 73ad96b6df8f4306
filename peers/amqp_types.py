"""Names for the AMQP 1.0 described types: descriptor codes, symbolic descriptors and field names.

This is a naming table, not a codec: values are decoded and encoded by ``proton.Data``. The table
lets a decoded ``Described(ulong(0x15), [...])`` be shown and matched as
``{"@type": "disposition", "role": "receiver", "first": 0, ...}``.
Field lists follow the AMQP 1.0 specification (OASIS, 2012), sections 2.7, 2.8, 3.2, 3.4, 3.5, 4.5, 5.3.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldSpec:
    """One field of a composite type as the specification defines it: its name, its type (a primitive such as
    ``uint``, ``symbol``, ``fields``; an archetype a described type provides, such as ``delivery-state``; ``any``
    where the specification writes ``*`` without an archetype), whether it is mandatory, and whether it is
    ``multiple`` (1.6.5: one value or an array of them)."""

    name: str
    type: str
    mandatory: bool = False
    multiple: bool = False


@dataclass(frozen=True)
class DescribedType:
    """One AMQP composite type: its numeric code, symbolic name and ordered field names, with each field's
    specification (:class:`FieldSpec`) in ``specs``."""

    code: int
    name: str
    symbol: str
    fields: tuple[str, ...]
    specs: tuple[FieldSpec, ...] = ()
    section: str = ""  # the specification section that defines it ("2.7.3")


def _t(code: int, name: str, symbol: str, fields: str) -> DescribedType:
    """A composite type from its fields written ``name:type``, ``!`` after the type for a mandatory field and
    ``*`` for a multiple one (``offered-capabilities:symbol*``, ``container-id:string!``)."""
    specs = []
    for item in fields.split():
        field_name, kind = item.split(":")
        specs.append(FieldSpec(field_name, kind.rstrip("!*"), "!" in kind, "*" in kind))
    return DescribedType(code, name, symbol, tuple(spec.name for spec in specs), tuple(specs), SECTIONS[name])


# The section of the AMQP 1.0 specification that defines each composite type.
SECTIONS = {
    "open": "2.7.1", "begin": "2.7.2", "attach": "2.7.3", "flow": "2.7.4", "transfer": "2.7.5",
    "disposition": "2.7.6", "detach": "2.7.7", "end": "2.7.8", "close": "2.7.9", "error": "2.8.14",
    "received": "3.4.1", "accepted": "3.4.2", "rejected": "3.4.3", "released": "3.4.4", "modified": "3.4.5",
    "source": "3.5.3", "target": "3.5.4", "delete-on-close": "3.5.10", "delete-on-no-links": "3.5.11",
    "delete-on-no-messages": "3.5.12", "delete-on-no-links-or-messages": "3.5.13", "coordinator": "4.5.1",
    "declare": "4.5.2", "discharge": "4.5.3", "declared": "4.5.4", "transactional-state": "4.5.5",
    "sasl-mechanisms": "5.3.3.1", "sasl-init": "5.3.3.2", "sasl-challenge": "5.3.3.3", "sasl-response": "5.3.3.4",
    "sasl-outcome": "5.3.3.5", "header": "3.2.1", "properties": "3.2.4",
}


# Field types as 2.7, 2.8, 3.2, 3.4, 3.5, 4.5 and 5.3 give them, restricted types written as their source type
# (milliseconds, seconds, handle, sequence-no, transfer-number, delivery-number, message-format: uint; role:
# boolean; sender- and receiver-settle-mode, sasl-code: ubyte; terminus-durability: uint; ietf-language-tag,
# terminus-expiry-policy: symbol; node-properties: fields; delivery-tag, txn-id: binary; address-string: string).
DESCRIBED_TYPES: tuple[DescribedType, ...] = (
    # 2.7 performatives
    _t(0x10, "open", "amqp:open:list", "container-id:string! hostname:string max-frame-size:uint "
       "channel-max:ushort idle-time-out:uint outgoing-locales:symbol* incoming-locales:symbol* "
       "offered-capabilities:symbol* desired-capabilities:symbol* properties:fields"),
    _t(0x11, "begin", "amqp:begin:list", "remote-channel:ushort next-outgoing-id:uint! incoming-window:uint! "
       "outgoing-window:uint! handle-max:uint offered-capabilities:symbol* desired-capabilities:symbol* "
       "properties:fields"),
    _t(0x12, "attach", "amqp:attach:list", "name:string! handle:uint! role:boolean! snd-settle-mode:ubyte "
       "rcv-settle-mode:ubyte source:source target:target unsettled:map incomplete-unsettled:boolean "
       "initial-delivery-count:uint max-message-size:ulong offered-capabilities:symbol* "
       "desired-capabilities:symbol* properties:fields"),
    _t(0x13, "flow", "amqp:flow:list", "next-incoming-id:uint incoming-window:uint! next-outgoing-id:uint! "
       "outgoing-window:uint! handle:uint delivery-count:uint link-credit:uint available:uint drain:boolean "
       "echo:boolean properties:fields"),
    _t(0x14, "transfer", "amqp:transfer:list", "handle:uint! delivery-id:uint delivery-tag:binary "
       "message-format:uint settled:boolean more:boolean rcv-settle-mode:ubyte state:delivery-state "
       "resume:boolean aborted:boolean batchable:boolean"),
    _t(0x15, "disposition", "amqp:disposition:list", "role:boolean! first:uint! last:uint settled:boolean "
       "state:delivery-state batchable:boolean"),
    _t(0x16, "detach", "amqp:detach:list", "handle:uint! closed:boolean error:error"),
    _t(0x17, "end", "amqp:end:list", "error:error"),
    _t(0x18, "close", "amqp:close:list", "error:error"),
    # 2.8.14 error
    _t(0x1D, "error", "amqp:error:list", "condition:symbol! description:string info:fields"),
    # 3.4 delivery states
    _t(0x23, "received", "amqp:received:list", "section-number:uint! section-offset:ulong!"),
    _t(0x24, "accepted", "amqp:accepted:list", ""),
    _t(0x25, "rejected", "amqp:rejected:list", "error:error"),
    _t(0x26, "released", "amqp:released:list", ""),
    _t(0x27, "modified", "amqp:modified:list", "delivery-failed:boolean undeliverable-here:boolean "
       "message-annotations:fields"),
    # 3.5 source and target
    _t(0x28, "source", "amqp:source:list", "address:address durable:uint expiry-policy:symbol timeout:uint "
       "dynamic:boolean dynamic-node-properties:fields distribution-mode:symbol filter:filter-set "
       "default-outcome:outcome outcomes:symbol* capabilities:symbol*"),
    _t(0x29, "target", "amqp:target:list", "address:address durable:uint expiry-policy:symbol timeout:uint "
       "dynamic:boolean dynamic-node-properties:fields capabilities:symbol*"),
    _t(0x2B, "delete-on-close", "amqp:delete-on-close:list", ""),
    _t(0x2C, "delete-on-no-links", "amqp:delete-on-no-links:list", ""),
    _t(0x2D, "delete-on-no-messages", "amqp:delete-on-no-messages:list", ""),
    _t(0x2E, "delete-on-no-links-or-messages", "amqp:delete-on-no-links-or-messages:list", ""),
    # 4.5 transactions
    _t(0x30, "coordinator", "amqp:coordinator:list", "capabilities:symbol*"),
    _t(0x31, "declare", "amqp:declare:list", "global-id:any"),
    _t(0x32, "discharge", "amqp:discharge:list", "txn-id:binary! fail:boolean"),
    _t(0x33, "declared", "amqp:declared:list", "txn-id:binary!"),
    _t(0x34, "transactional-state", "amqp:transactional-state:list", "txn-id:binary! outcome:outcome"),
    # 5.3 SASL
    _t(0x40, "sasl-mechanisms", "amqp:sasl-mechanisms:list", "sasl-server-mechanisms:symbol!*"),
    _t(0x41, "sasl-init", "amqp:sasl-init:list", "mechanism:symbol! initial-response:binary hostname:string"),
    _t(0x42, "sasl-challenge", "amqp:sasl-challenge:list", "challenge:binary!"),
    _t(0x43, "sasl-response", "amqp:sasl-response:list", "response:binary!"),
    _t(0x44, "sasl-outcome", "amqp:sasl-outcome:list", "code:ubyte! additional-data:binary"),
    # 3.2 message sections that are lists
    _t(0x70, "header", "amqp:header:list", "durable:boolean priority:ubyte ttl:uint first-acquirer:boolean "
       "delivery-count:uint"),
    _t(0x73, "properties", "amqp:properties:list", "message-id:message-id user-id:binary to:address "
       "subject:string reply-to:address correlation-id:message-id content-type:symbol content-encoding:symbol "
       "absolute-expiry-time:timestamp creation-time:timestamp group-id:string group-sequence:uint "
       "reply-to-group-id:string"),
)

BY_CODE: dict[int, DescribedType] = {t.code: t for t in DESCRIBED_TYPES}
BY_SYMBOL: dict[str, DescribedType] = {t.symbol: t for t in DESCRIBED_TYPES}
BY_NAME: dict[str, DescribedType] = {t.name: t for t in DESCRIBED_TYPES}
# 3.4: the delivery states; 4.5.5 adds transactional-state, which carries one of the outcomes among them.
DELIVERY_STATE_NAMES = ("received", "accepted", "rejected", "released", "modified")


def type_of(descriptor: object) -> DescribedType | None:
    """The described type a decoded descriptor names, in either of its two forms (1.5, "descriptor"): a
    number is looked up by code, a symbol (any ``str``) by its symbolic name. None for a descriptor not in
    the table, and for anything that is neither a number nor a symbol (``None`` included)."""
    if isinstance(descriptor, int):
        return BY_CODE.get(int(descriptor))
    if isinstance(descriptor, str):
        return BY_SYMBOL.get(str(descriptor))
    return None


PERFORMATIVES = frozenset(
    "open begin attach flow transfer disposition detach end close".split()
)
SASL_PERFORMATIVES = frozenset(
    "sasl-mechanisms sasl-init sasl-challenge sasl-response sasl-outcome".split()
)

# Restricted types with named choices (2.8): shown by choice name, as the specification names them.
ROLE = {False: "sender", True: "receiver"}
SND_SETTLE_MODE = {0: "unsettled", 1: "settled", 2: "mixed"}
RCV_SETTLE_MODE = {0: "first", 1: "second"}
TERMINUS_DURABILITY = {0: "none", 1: "configuration", 2: "unsettled-state"}

CHOICE_FIELDS: dict[tuple[str, str], dict] = {
    ("attach", "role"): ROLE,
    ("disposition", "role"): ROLE,
    ("attach", "snd-settle-mode"): SND_SETTLE_MODE,
    ("attach", "rcv-settle-mode"): RCV_SETTLE_MODE,
    ("transfer", "rcv-settle-mode"): RCV_SETTLE_MODE,
    ("source", "durable"): TERMINUS_DURABILITY,
    ("target", "durable"): TERMINUS_DURABILITY,
}


def choice_value(type_name: str, field: str, name: str) -> int | bool:
    """The wire value of a restricted-type choice given by name, e.g. ("attach", "role", "receiver") -> True.

    Raises KeyError naming the valid choices when ``name`` is not one of them.
    """
    choices = CHOICE_FIELDS[(type_name, field)]
    for value, choice in choices.items():
        if choice == name:
            return value
    raise KeyError(f"{type_name}.{field} has no choice {name!r}; valid: {sorted(choices.values())}")


TERMINUS_EXPIRY_POLICY = frozenset({"link-detach", "session-end", "connection-close", "never"})
# The values a restricted type with choices allows, by (composite type, field) (2.8, 3.5.5, 3.5.6, 5.3.3.6).
ALLOWED_VALUES: dict[tuple[str, str], frozenset] = {
    **{key: frozenset(choices) for key, choices in CHOICE_FIELDS.items()},
    ("source", "expiry-policy"): TERMINUS_EXPIRY_POLICY,
    ("target", "expiry-policy"): TERMINUS_EXPIRY_POLICY,
    ("sasl-outcome", "code"): frozenset(range(5)),
}
