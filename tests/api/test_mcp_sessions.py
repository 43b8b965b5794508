"""REST sessions with MCP tools: a real ``loom serve --mcp-config`` on the real default model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from tests.api.server import Server

WEATHER = Path(__file__).resolve().parents[1] / "tools" / "mcp_servers" / "weather.py"


@pytest.fixture(scope="module")
def mcp_server(real_model: Path, real_quantization: str, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("api-mcp")
    cfg = work / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"weather": {"command": sys.executable, "args": [str(WEATHER)]}}}))
    srv = Server(real_model, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--max-model-len", "2048",
                 "--num-kv-blocks", "256", "--mcp-config", str(cfg), "--quantization", real_quantization).start()
    yield srv
    srv.stop()


def test_session_turn_calls_an_mcp_tool_of_the_configured_server(mcp_server: Server) -> None:
    with httpx.Client(base_url=mcp_server.url, timeout=300) as c:
        r = c.post("/v1/sessions", json={"tools": ["mcp:weather/get_weather"],
                                          "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                                          "max_steps": 2, "sampling": {"max_tokens": 48}})
        assert r.status_code == 200, r.text
        sid = r.json()["id"]
        turn = c.post(f"/v1/sessions/{sid}/messages", json={"content": "What is the weather in Paris?"})
        assert turn.status_code == 200, turn.text
        t = turn.json()
        assert [c["name"] for c in t["tool_calls"]][:1] == ["get_weather"]
        assert t["tool_results"][0]["content"].startswith("Sunny, 21 C in ")
        assert not t["tool_results"][0]["is_error"]
    engine = mcp_server.wait_idle()["engine"]
    assert engine["kv_blocks_free"] == engine["kv_blocks_total"]


@pytest.mark.parametrize("name, needle", [("mcp:nowhere", "no MCP server named 'nowhere'"),
                                          ("mcp:weather/nosuch", "has no tool 'nosuch'")])
def test_unknown_mcp_server_or_tool_is_a_400_naming_tools(mcp_server: Server, name: str, needle: str) -> None:
    with httpx.Client(base_url=mcp_server.url, timeout=60) as c:
        r = c.post("/v1/sessions", json={"tools": [name]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools" and needle in err["message"]


def test_bad_mcp_config_fails_the_start_in_one_line(real_model: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"x": {"command": "a", "url": "http://h"}}}))
    srv = Server(real_model, f"sqlite:///{tmp_path / 'loom.db'}", tmp_path, "--no-auth", "--mcp-config", str(cfg))
    with pytest.raises(RuntimeError, match=r"mcpServers\.x"):
        srv.start(timeout=120)
    assert "Traceback" not in srv.log()
