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


def test_health_is_asked_once_the_unit_is_active_and_an_activating_unit_gets_the_settle_time(tmp_path, monkeypatch):
    """A start ready in 0.6 s is ready then, not after the 2 s settle time; a unit still activating after the settle
    time is a failed start at stage active, without a request."""
    import time

    (tmp_path / "secrets.yaml").write_text('api-key: "sk-the-key"\n')
    store = type("S", (), {"service": "sglang", "secrets_path": str(tmp_path / "secrets.yaml")})()
    began, sent, active_after = time.monotonic(), [], [0.6]

    def status(service):
        state = "active" if time.monotonic() - began >= active_after[0] else "activating"
        return {"active_state": state, "sub_state": "start", "result": "success", "main_pid": 1}

    def http(url, body=None, api_key=None, timeout=0):
        sent.append(url)
        if url.endswith("/generate"):
            return 200, b'{"meta_info": {"completion_tokens": 8}}'
        return (401, b"") if url.endswith("/v1/models") else (200, b"{}")

    monkeypatch.setattr(readiness, "service_status", status)
    monkeypatch.setattr(readiness, "http", http)
    monkeypatch.setattr(readiness, "foreign_listener", lambda s, u: None)
    monkeypatch.setattr(readiness, "journal_since", lambda *a: "")
    result = readiness.wait_ready(store, "http://127.0.0.1:30000", timeout=10, settle=2.0)
    assert result["ready"] and result["elapsed_s"] < 1.5, result
    began, sent, active_after[0] = time.monotonic(), [], 60
    result = readiness.wait_ready(store, "http://127.0.0.1:30000", timeout=10, settle=1.0)
    assert (result["ready"], result["stage"], sent) == (False, "active", []), result
    assert "sglang.service is activating" in result["detail"]
