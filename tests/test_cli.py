"""The `pheby` console command: accounts, tokens, disabling, and the one-worker rule."""

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pheby.cli import main
from pheby.db import SqliteDatabase
from pheby.store.accounts import Accounts, HermesAccountSettings
from pheby.store.second_factor import SecondFactors
from tests.passwords import PASSWORD


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_account_lifecycle(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{PASSWORD}\n"))
    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path), "account", "create", "alice", "--password-stdin")
    assert code == 0
    created = json.loads(out)
    assert created["name"] == "alice"
    assert len(created["id"]) == 32

    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path), "account", "token", "alice")
    assert code == 0
    assert json.loads(out)["token"].startswith("phb_")

    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "account", "create", "alice")
    assert code == 1
    assert "already exists" in err

    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path), "account", "disable", "alice")
    assert code == 0
    assert json.loads(out)["disabled"] is True

    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path), "account", "token", "nobody")
    assert code == 1
    assert "not found" in err.lower()


def test_account_hermes_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert run_cli(capsys, *data, "account", "create", "alice")[0] == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("alice-api-key\ndash-token\n"))
    code, out, _ = run_cli(
        capsys,
        *data,
        "account",
        "hermes",
        "alice",
        "--url",
        "http://127.0.0.1:8650",
        "--home",
        str(tmp_path / "alice-home"),
        "--api-key-stdin",
        "--dashboard-token-stdin",
    )
    assert code == 0
    shown = json.loads(out)["hermes"]
    assert shown == {
        "url": "http://127.0.0.1:8650",
        "home": str(tmp_path / "alice-home"),
        "dashboard_url": None,
        "media_roots": [],
        "api_key": True,
        "dashboard_token": True,
    }
    assert "alice-api-key" not in out  # secrets are never printed
    assert "dash-token" not in out

    async def stored() -> HermesAccountSettings:
        db = SqliteDatabase(tmp_path / "pheby.sqlite3")
        await db.open()
        try:
            return (await Accounts(db).get_by_name("alice")).hermes
        finally:
            await db.close()

    own = asyncio.run(stored())
    assert (own.url, own.api_key, own.dashboard_token) == ("http://127.0.0.1:8650", "alice-api-key", "dash-token")

    code, out, _ = run_cli(capsys, *data, "account", "hermes", "alice")  # no options: the server's again
    assert code == 0
    shown = json.loads(out)["hermes"]
    assert shown.pop("media_roots") == []
    assert set(shown.values()) == {None, False}
    assert asyncio.run(stored()) == HermesAccountSettings()

    roots = [str(tmp_path / "alice-media"), str(tmp_path / "shared")]
    code, out, _ = run_cli(
        capsys, *data, "account", "hermes", "alice", "--media-root", roots[0], "--media-root", roots[1]
    )
    assert code == 0
    assert json.loads(out)["hermes"]["media_roots"] == roots
    assert asyncio.run(stored()) == HermesAccountSettings(media_roots=tuple(roots))

    # Her own gateway's files are on its machine: the server's disk is never read for her.
    code, _, err = run_cli(
        capsys, *data, "account", "hermes", "alice", "--url", "http://127.0.0.1:8650", "--media-root", roots[0]
    )
    assert code == 1
    assert "own Hermes gateway can't be given media roots" in err
    assert asyncio.run(stored()) == HermesAccountSettings(media_roots=tuple(roots))  # unchanged


def test_account_enable_revoke_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert run_cli(capsys, *data, "account", "create", "alice")[0] == 0
    tokens = [json.loads(run_cli(capsys, *data, "account", "token", "alice")[1])["token"] for _ in range(2)]
    assert json.loads(run_cli(capsys, *data, "account", "disable", "alice")[1])["disabled"] is True
    assert json.loads(run_cli(capsys, *data, "account", "enable", "alice")[1])["disabled"] is False

    async def live() -> list[bool]:
        db = SqliteDatabase(tmp_path / "pheby.sqlite3")
        await db.open()
        try:
            return [await Accounts(db).resolve_token(t) is not None for t in tokens]
        finally:
            await db.close()

    assert asyncio.run(live()) == [True, True]  # enabled again, the tokens work again
    code, out, _ = run_cli(capsys, *data, "account", "revoke", "alice")
    assert code == 0
    assert json.loads(out)["revoked"] == 2
    assert asyncio.run(live()) == [False, False]
    code, out, _ = run_cli(capsys, *data, "account", "list")
    assert code == 0
    listed = json.loads(out)
    assert [a["name"] for a in listed] == ["owner", "alice"]
    assert all(set(a) == {"id", "name", "is_owner", "disabled", "created_at", "hermes"} for a in listed)
    assert run_cli(capsys, *data, "account", "revoke", "nobody")[0] == 1


def test_account_totp_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An operator turns off the second factor of someone who lost the authenticator and the recovery codes."""
    data = ["--data-dir", str(tmp_path)]
    account_id = json.loads(run_cli(capsys, *data, "account", "create", "alice")[1])["id"]

    async def turn_on() -> None:
        db = SqliteDatabase(tmp_path / "pheby.sqlite3")
        await db.open()
        try:
            second_factors = SecondFactors(db)
            assert await second_factors.set_pending(account_id, "JBSWY3DPEHPK3PXP")
            assert await second_factors.enable(account_id, "JBSWY3DPEHPK3PXP", 1, ["code"])
        finally:
            await db.close()

    async def is_on() -> bool:
        db = SqliteDatabase(tmp_path / "pheby.sqlite3")
        await db.open()
        try:
            return await SecondFactors(db).is_enabled(account_id)
        finally:
            await db.close()

    asyncio.run(turn_on())
    assert asyncio.run(is_on())
    code, out, _ = run_cli(capsys, *data, "account", "totp-off", "alice")
    assert code == 0
    assert json.loads(out) == {"id": account_id, "name": "alice", "totp": False}
    assert not asyncio.run(is_on())
    assert run_cli(capsys, *data, "account", "totp-off", "nobody")[0] == 1


def test_account_create_help_says_accounts_share_the_servers_agent(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["account", "create", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "share one agent: its memory, its tools" in text


def test_data_dir_from_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHEBY_DATA_DIR", str(tmp_path / "env-dir"))
    code, _, _ = run_cli(capsys, "account", "create", "zoe")
    assert code == 0
    assert (tmp_path / "env-dir" / "pheby.sqlite3").exists()


def test_serve_refuses_more_than_one_worker(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pheby_main", "serve", "--workers", "2", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "one worker" in lines[0]


def test_bad_setting_stops_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pheby_main", "serve", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PHEBY_PORT": "not-a-port"},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "PHEBY_PORT" in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["account", "create", "alice"],
        ["account", "token", "alice"],
        ["account", "disable", "alice"],
        ["account", "enable", "alice"],
        ["account", "revoke", "alice"],
        ["account", "totp-off", "alice"],
        ["account", "hermes", "alice"],
        ["account", "list"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_data_dir_is_accepted_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`--data-dir` works before or after the subcommand, for every command."""
    data = tmp_path / "after"
    if argv[:2] != ["account", "create"]:
        assert run_cli(capsys, "account", "create", "alice", "--data-dir", str(data))[0] == 0
    code, out, err = run_cli(capsys, *argv, "--data-dir", str(data))
    assert code == 0, err
    assert "alice" in out or "phb_" in out
    assert (data / "pheby.sqlite3").exists()


def test_data_dir_after_the_subcommand_wins_over_the_one_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    assert run_cli(capsys, "--data-dir", str(before), "account", "create", "alice", "--data-dir", str(after))[0] == 0
    assert (after / "pheby.sqlite3").exists()
    assert not (before / "pheby.sqlite3").exists()
