"""The client's address behind reverse proxies (``SERVICE_TRUSTED_PROXIES``).

A proxy appends the address it got the request from to ``X-Forwarded-For``
(or adds ``Forwarded: for=...``, RFC 7239). Only the hops we trust can be
believed: from the right, every address that is one of our proxies is
skipped, and the first that is not is the client. A request that does not
come from a trusted proxy keeps its socket's peer address, whatever headers
it sends, so a client cannot pick the address its limits are counted under.
Nor can it behind one: a request with both headers keeps the proxy's address,
since the client may have sent either.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Final

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS: Final = 32
"""Forwarding hops read at most (a header can be made arbitrarily long)."""


def parse_networks(text: str) -> tuple[Network, ...]:
    """``"10.0.0.1, 192.168.0.0/16, ::1"`` -> networks; ValueError naming a bad item."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR") from None
    return tuple(networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # [v6] or [v6]:port
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # ::ffff:a.b.c.d is a.b.c.d (a dual-stack proxy's spelling of an IPv4
        # client): trusted as that proxy is, counted as that client is.
        return address.ipv4_mapped
    return address


def _hops(headers: Mapping[str, str]) -> list[str]:
    forwarded_for = headers.get("x-forwarded-for")
    forwarded = headers.get("forwarded")
    if forwarded_for is not None and forwarded is not None:
        # Our proxy wrote one of them and passed the client's other through,
        # and nothing tells which: reading either would let a client behind
        # a proxy that writes the other pick its own address.
        return []
    if forwarded_for is not None:
        return [hop for hop in forwarded_for.split(",")][-MAX_HOPS:]
    if forwarded is None:
        return []
    hops = []
    for element in forwarded.split(",")[-MAX_HOPS:]:
        # One element per hop. One without for= (a proxy that forwards only
        # proto or host) is a hop whose client is unknown: "" reads as no
        # address, so nothing further left, which its client wrote, is believed.
        hop = ""
        for pair in element.split(";"):
            name, _, value = pair.partition("=")
            if name.strip().lower() == "for":
                hop = value
        hops.append(hop)
    return hops


def client_address(peer: str, headers: Mapping[str, str], trusted: Sequence[Network]) -> str:
    """The client's address: ``peer`` unless it is a trusted proxy, then the
    rightmost forwarded address that is not one."""
    if not trusted or not peer:
        return peer
    peer_address = _address(peer)
    if peer_address is None or not any(peer_address in net for net in trusted):
        return peer
    for hop in reversed(_hops(headers)):
        address = _address(hop)
        if address is None:
            return peer  # a hop we cannot read: believe nothing further left
        if not any(address in net for net in trusted):
            return str(address)
    return peer
