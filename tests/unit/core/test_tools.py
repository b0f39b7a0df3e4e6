"""Child processes find dvc and roar beside the running interpreter, or say in one line what to do."""

from __future__ import annotations

import shutil

import pytest

from roar.core.errors import RoarError


def test_tool_env_puts_the_interpreters_scripts_first(monkeypatch):
    from roar.core.tools import scripts_folder, tool_env

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = tool_env(ROAR_STUDY_RUN_ID="abc")
    assert env["PATH"].split(":")[0] == str(scripts_folder()) and env["PATH"].endswith("/usr/bin:/bin")
    assert env["ROAR_STUDY_RUN_ID"] == "abc"
    assert shutil.which("dvc", path=env["PATH"]).startswith(str(scripts_folder()))
    assert shutil.which("roar", path=env["PATH"]).startswith(str(scripts_folder()))


def test_tool_env_says_what_to_do_when_dvc_is_nowhere(monkeypatch, tmp_path):
    import roar.core.tools as tools

    monkeypatch.setattr(tools, "scripts_folder", lambda: tmp_path)
    monkeypatch.setattr(tools.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(RoarError, match=r"dvc not found .*run `make setup`.*activate the virtualenv"):
        tools.tool_env({"PATH": str(tmp_path)})
