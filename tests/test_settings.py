"""Settings come from the environment and flags; a bad value names its variable in one line."""

import stat
from pathlib import Path

import pytest

from pheby.settings import SettingsError, load_settings


def test_defaults_and_environment(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "PHEBY_DATA_DIR": str(tmp_path),
            "PHEBY_SECRET": "s" * 20,
            "PHEBY_PORT": "9001",
            "PHEBY_ATTACHMENT_RETENTION_DAYS": "0",
            "PHEBY_ALLOWED_ORIGINS": "https://a.example, https://b.example",
            "PHEBY_MEDIA_ROOTS": f"{tmp_path}/x:{tmp_path}/y",
            "HERMES_URL": "http://127.0.0.1:8642",
        }
    )
    assert settings.port == 9001
    assert settings.attachment_retention_days == 0
    assert settings.allowed_origins == ("https://a.example", "https://b.example")
    assert settings.media_roots == (tmp_path / "x", tmp_path / "y")
    assert settings.storage == "local"
    assert settings.job_poll_seconds == 30


def test_flags_override_environment(tmp_path: Path) -> None:
    settings = load_settings({"PHEBY_PORT": "9001", "PHEBY_SECRET": "s" * 20}, port=9002, data_dir=tmp_path)
    assert settings.port == 9002


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"PHEBY_PORT": "eighty"}, "PHEBY_PORT"),
        ({"PHEBY_PORT": "70000"}, "PHEBY_PORT"),
        ({"PHEBY_STORAGE": "floppy"}, "PHEBY_STORAGE"),
        ({"PHEBY_ATTACHMENT_RETENTION_DAYS": "-1"}, "PHEBY_ATTACHMENT_RETENTION_DAYS"),
        ({"PHEBY_JOB_POLL_SECONDS": "0"}, "PHEBY_JOB_POLL_SECONDS"),
        ({"PHEBY_SECRET": "short"}, "PHEBY_SECRET"),
        ({"PHEBY_STORAGE": "s3"}, "PHEBY_S3_BUCKET"),
        ({"PHEBY_ALLOWED_ORIGINS": "not an origin"}, "PHEBY_ALLOWED_ORIGINS"),
        ({"HERMES_URL": "ftp://x"}, "HERMES_URL"),
        ({"PHEBY_TRUSTED_PROXIES": "10.0.0.0/8,not-an-ip"}, "PHEBY_TRUSTED_PROXIES"),
    ],
)
def test_bad_value_names_the_variable(tmp_path: Path, env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"PHEBY_SECRET": "s" * 20, **env}, data_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"{variable}:")
    assert "\n" not in message


def test_generated_secret_is_kept_private_in_the_data_dir(tmp_path: Path) -> None:
    first = load_settings({}, data_dir=tmp_path)
    second = load_settings({}, data_dir=tmp_path)
    assert first.secret == second.secret
    assert len(first.secret) >= 32
    mode = stat.S_IMODE((tmp_path / "secret").stat().st_mode)
    assert mode == 0o600
