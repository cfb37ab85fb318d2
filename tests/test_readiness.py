"""Readiness on the host (sglang_deploy/hostside/lib/readiness.py), without a server: is the release's server ready,
and is it really the release's server?"""

from __future__ import annotations

from sglang_deploy.hostside.lib import readiness


def test_a_free_port_is_not_ready_and_gets_no_key(tmp_path, monkeypatch):
    """Readiness: /health answered, then nothing listens (a squatter between two listens): wait, never send."""
    (tmp_path / "secrets.yaml").write_text('api-key: "sk-the-key"\n')
    store = type("S", (), {"service": "sglang", "secrets_path": str(tmp_path / "secrets.yaml")})()
    sent = []
    monkeypatch.setattr(readiness, "service_status", lambda s: {"active_state": "active", "main_pid": 1})
    monkeypatch.setattr(readiness, "http", lambda url, body=None, api_key=None, timeout=0:
                        sent.append((url, api_key)) or (200, b"{}"))
    monkeypatch.setattr(readiness, "foreign_listener", lambda s, u: "nothing listens on port 30000")
    monkeypatch.setattr(readiness, "journal_since", lambda *a: "")
    result = readiness.wait_ready(store, "http://127.0.0.1:30000", timeout=1.5, settle=0)
    assert (result["ready"], "nothing listens on port 30000" in result["detail"]) == (False, True), result
    assert sent and all(url.endswith("/health") and key is None for url, key in sent), sent
