"""`pheby hermes install-plugin`: the plugin copied into HERMES_HOME, config.yaml changed only where needed."""

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from pheby.cli import main
from pheby.plugin.install import HERMES_SECRET_FILE, PLUGIN_SOURCE, SERVER_SECRET_FILE, configure, read_server_secret

EXISTING: dict[str, Any] = {
    "model": {"default": "fake-model", "provider": "custom", "base_url": "http://127.0.0.1:1/v1"},
    "approvals": {"mode": "manual", "timeout": 60},
    "plugins": {"enabled": ["some-other-plugin"], "disabled": ["pheby_bridge", "noisy"]},
    "platform_toolsets": {"api_server": ["hermes-api-server", "web"], "telegram": ["hermes-telegram"]},
    "platforms": {"api_server": {"enabled": True, "extra": {"port": 8642, "key": "k" * 24}}},
    "command_allowlist": ["delete in root path"],
    "_config_version": 33,
}


def install(data_dir: Path, home: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    argv = ["--data-dir", str(data_dir), "hermes", "install-plugin", "--home", str(home), *extra]
    assert main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_install_twice_keeps_one_entry_and_the_rest_of_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, data_dir = tmp_path / "hermes-home", tmp_path / "data"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump(EXISTING, sort_keys=False), encoding="utf-8")

    first = install(data_dir, home, capsys, "--server-url", "http://127.0.0.1:8620")
    assert first["config_changed"] is True
    after_first = (home / "config.yaml").read_bytes()
    second = install(data_dir, home, capsys, "--server-url", "http://127.0.0.1:8620")
    assert second["config_changed"] is False
    assert (home / "config.yaml").read_bytes() == after_first  # not even rewritten

    config = yaml.safe_load(after_first)
    assert config["plugins"]["enabled"] == ["some-other-plugin", "pheby_bridge"]
    assert config["plugins"]["disabled"] == ["noisy"]  # "disabled" always wins in Hermes: taken out
    assert config["platform_toolsets"] == {
        "api_server": ["hermes-api-server", "web", "clarify"],
        "telegram": ["hermes-telegram"],
    }
    assert config["platforms"]["pheby_bridge"] == {
        "enabled": True,
        "extra": {"service_url": "http://127.0.0.1:8620", "secret_file": HERMES_SECRET_FILE},
    }
    for key in ("model", "approvals", "command_allowlist", "_config_version"):
        assert config[key] == EXISTING[key]
    assert config["platforms"]["api_server"] == EXISTING["platforms"]["api_server"]

    plugin = home / "plugins" / "pheby_bridge"
    assert sorted(p.name for p in plugin.iterdir()) == sorted(
        p.name for p in PLUGIN_SOURCE.iterdir() if p.name != "__pycache__"
    )
    assert not list((home / "plugins").glob(".pheby_bridge-*"))  # no staging left behind


def test_both_sides_share_one_private_secret_that_survives_reinstalls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, data_dir = tmp_path / "home", tmp_path / "data"
    install(data_dir, home, capsys)
    hermes_side = (home / HERMES_SECRET_FILE).read_text().strip()
    assert len(hermes_side) >= 32
    assert read_server_secret(data_dir) == hermes_side
    for path in (home / HERMES_SECRET_FILE, data_dir / SERVER_SECRET_FILE):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (data_dir / SERVER_SECRET_FILE).unlink()  # e.g. a new data dir: the Hermes side's secret is reused
    result = install(data_dir, home, capsys, "--server-url", "http://10.0.0.5:9000")
    assert read_server_secret(data_dir) == hermes_side
    assert result["service_url"] == "http://10.0.0.5:9000"
    config = yaml.safe_load((home / "config.yaml").read_text())
    assert config["platforms"]["pheby_bridge"]["extra"]["service_url"] == "http://10.0.0.5:9000"
    assert config["platform_toolsets"]["api_server"] == ["hermes-api-server", "clarify"]


def test_default_url_is_this_servers_and_bad_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHEBY_HOST", "0.0.0.0")
    monkeypatch.setenv("PHEBY_PORT", "9123")
    result = install(tmp_path / "data", tmp_path / "home", capsys)
    assert result["service_url"] == "http://127.0.0.1:9123"

    argv = ["--data-dir", str(tmp_path / "data"), "hermes", "install-plugin", "--home", str(tmp_path / "home")]
    assert main([*argv, "--server-url", "ftp://nowhere"]) == 1
    assert "http://" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.yaml").write_text("- just\n- a list\n")
    assert (
        main(["--data-dir", str(tmp_path / "data"), "hermes", "install-plugin", "--home", str(tmp_path / "broken")])
        == 1
    )
    assert "mapping" in capsys.readouterr().err
    assert (tmp_path / "broken" / "config.yaml").read_text() == "- just\n- a list\n"
    assert sorted(p.name for p in (tmp_path / "broken").iterdir()) == ["config.yaml"]  # nothing else touched


def test_configure_leaves_its_input_alone() -> None:
    original = json.loads(json.dumps(EXISTING))
    configure(EXISTING, "http://127.0.0.1:1")
    assert original == EXISTING
