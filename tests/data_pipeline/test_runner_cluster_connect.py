"""Connecting to a cluster address without starting Ray: what is checked before `ray.init`."""

from __future__ import annotations

import socket

import pytest

from pretrain import rayinit
from pretrain.errors import PretrainError


def test_an_address_nobody_listens_on_is_one_line_at_once() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(PretrainError, match="nothing accepts connections") as err:
            rayinit._probe(f"127.0.0.1:{port}")
    assert "\n" not in str(err.value) and f"ray status --address 127.0.0.1:{port}" in str(err.value)


def test_token_is_found_where_ray_looks(tmp_path, monkeypatch) -> None:
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not rayinit.token_available()
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("")
    assert not rayinit.token_available()  # an empty file is no token
    (tmp_path / ".ray" / "auth_token").write_text("abc123\n")
    assert rayinit.token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    assert not rayinit.token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN", "xyz")
    assert rayinit.token_available()
