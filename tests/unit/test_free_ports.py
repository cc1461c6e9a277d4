"""`dynalab.cluster.free_ports`: listeners' ports, drawn below the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket

import pytest

from dynalab.cluster import LISTEN_PORTS_LOW, LOOPBACK, _ephemeral_ports_low, free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(LISTEN_PORTS_LOW <= port < _ephemeral_ports_low() for port in ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, port))


def test_a_port_in_use_is_never_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((LOOPBACK, free_ports(1)[0]))
        listener.listen()
        taken = listener.getsockname()[1]
        # The draw offers the port in use first, then twice the same free port, then any.
        (spare,) = free_ports(1)
        offers = iter([taken, spare, spare])
        draw = random.randrange
        monkeypatch.setattr(random, "randrange", lambda low, high: next(offers, draw(low, high)))
        ports = free_ports(2)
        assert ports[0] == spare and taken not in ports and len(set(ports)) == 2
