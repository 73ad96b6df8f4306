"""Names for the AMQP 1.0 described types: descriptor codes, symbolic descriptors and field names.

This is a naming table, not a codec: values are decoded and encoded by ``proton.Data``. The table
lets a decoded ``Described(ulong(0x15), [...])`` be shown and matched as
``{"@type": "disposition", "role": "receiver", "first": 0, ...}``.
Field lists follow the AMQP 1.0 specification (OASIS, 2012), sections 2.7, 2.8, 3.2, 3.4, 3.5, 4.5, 5.3.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DescribedType:
    """One AMQP composite type: its numeric code, symbolic name and ordered field names."""

    code: int
    name: str
    symbol: str
    fields: tuple[str, ...]


def _t(code: int, name: str, symbol: str, fields: str) -> DescribedType:
    return DescribedType(code, name, symbol, tuple(fields.split()))


DESCRIBED_TYPES: tuple[DescribedType, ...] = (
    # 2.7 performatives
    _t(0x10, "open", "amqp:open:list", "container-id hostname max-frame-size channel-max idle-time-out "
       "outgoing-locales incoming-locales offered-capabilities desired-capabilities properties"),
    _t(0x11, "begin", "amqp:begin:list", "remote-channel next-outgoing-id incoming-window outgoing-window "
       "handle-max offered-capabilities desired-capabilities properties"),
    _t(0x12, "attach", "amqp:attach:list", "name handle role snd-settle-mode rcv-settle-mode source target "
       "unsettled incomplete-unsettled initial-delivery-count max-message-size offered-capabilities "
       "desired-capabilities properties"),
    _t(0x13, "flow", "amqp:flow:list", "next-incoming-id incoming-window next-outgoing-id outgoing-window "
       "handle delivery-count link-credit available drain echo properties"),
    _t(0x14, "transfer", "amqp:transfer:list", "handle delivery-id delivery-tag message-format settled more "
       "rcv-settle-mode state resume aborted batchable"),
    _t(0x15, "disposition", "amqp:disposition:list", "role first last settled state batchable"),
    _t(0x16, "detach", "amqp:detach:list", "handle closed error"),
    _t(0x17, "end", "amqp:end:list", "error"),
    _t(0x18, "close", "amqp:close:list", "error"),
    # 2.8.14 error
    _t(0x1D, "error", "amqp:error:list", "condition description info"),
    # 3.4 delivery states
    _t(0x23, "received", "amqp:received:list", "section-number section-offset"),
    _t(0x24, "accepted", "amqp:accepted:list", ""),
    _t(0x25, "rejected", "amqp:rejected:list", "error"),
    _t(0x26, "released", "amqp:released:list", ""),
    _t(0x27, "modified", "amqp:modified:list", "delivery-failed undeliverable-here message-annotations"),
    # 3.5 source and target
    _t(0x28, "source", "amqp:source:list", "address durable expiry-policy timeout dynamic "
       "dynamic-node-properties distribution-mode filter default-outcome outcomes capabilities"),
    _t(0x29, "target", "amqp:target:list", "address durable expiry-policy timeout dynamic "
       "dynamic-node-properties capabilities"),
    _t(0x2B, "delete-on-close", "amqp:delete-on-close:list", ""),
    _t(0x2C, "delete-on-no-links", "amqp:delete-on-no-links:list", ""),
    _t(0x2D, "delete-on-no-messages", "amqp:delete-on-no-messages:list", ""),
    _t(0x2E, "delete-on-no-links-or-messages", "amqp:delete-on-no-links-or-messages:list", ""),
    # 4.5 transactions
    _t(0x30, "coordinator", "amqp:coordinator:list", "capabilities"),
    _t(0x31, "declare", "amqp:declare:list", "global-id"),
    _t(0x32, "discharge", "amqp:discharge:list", "txn-id fail"),
    _t(0x33, "declared", "amqp:declared:list", "txn-id"),
    _t(0x34, "transactional-state", "amqp:transactional-state:list", "txn-id outcome"),
    # 5.3 SASL
    _t(0x40, "sasl-mechanisms", "amqp:sasl-mechanisms:list", "sasl-server-mechanisms"),
    _t(0x41, "sasl-init", "amqp:sasl-init:list", "mechanism initial-response hostname"),
    _t(0x42, "sasl-challenge", "amqp:sasl-challenge:list", "challenge"),
    _t(0x43, "sasl-response", "amqp:sasl-response:list", "response"),
    _t(0x44, "sasl-outcome", "amqp:sasl-outcome:list", "code additional-data"),
    # 3.2 message sections that are lists
    _t(0x70, "header", "amqp:header:list", "durable priority ttl first-acquirer delivery-count"),
    _t(0x73, "properties", "amqp:properties:list", "message-id user-id to subject reply-to correlation-id "
       "content-type content-encoding absolute-expiry-time creation-time group-id group-sequence "
       "reply-to-group-id"),
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
