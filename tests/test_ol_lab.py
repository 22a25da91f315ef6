"""``ol lab`` (JupyterLab on the chapters, bound to the workspace) and ``ol start`` remembering the
workspace, end to end through ``ol``; ``--dry-run`` prints the command instead of starting a server."""

from __future__ import annotations

import json
import shlex

from ol_helpers import ROOT, ol


def dry_run(*args: str, cwd, memo=None):
    env = {"OL_LAST_WORKSPACE_FILE": str(memo)} if memo else None
    ran = ol("lab", "--dry-run", *args, workspace=cwd, env=env)
    assert ran.code == 0, ran.text
    words = shlex.split(ran.out.strip().splitlines()[-1])
    settings = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if "=" in w}
    return words, settings


def test_lab_refuses_a_workspace_where_the_module_is_not_started(tmp_path):
    ran = ol("lab", "--workspace", "work", "--dry-run", workspace=tmp_path)
    assert ran.code == 2
    assert "L10.8 is not started in" in ran.err and str(tmp_path / "work") in ran.err
    assert "ol start L10.8 --workspace work" in ran.err and "Traceback" not in ran.text


def test_lab_opens_the_chapters_with_the_absolute_workspace(tmp_path):
    assert ol("start", "L10.8", "--workspace", "work", workspace=tmp_path).code == 0
    words, settings = dry_run("--workspace", "work", "--", "--no-browser", "--port=8899", cwd=tmp_path)
    assert settings["OL_WORKSPACE"] == str(tmp_path / "work")  # relative to where it was typed
    assert str(ROOT / "notebooks") in settings["PYTHONPATH"].split(":")
    assert words[words.index("-m") + 1:words.index("-m") + 3] == ["jupyter", "lab"]
    assert settings["--ServerApp.root_dir"] == str(ROOT / "notebooks")
    assert words[-2:] == ["--no-browser", "--port=8899"]
    overrides = json.loads((tmp_path / "work" / ".ol" / "lab-settings" / "overrides.json").read_text())
    assert settings["--LabApp.app_settings_dir"] == str(tmp_path / "work" / ".ol" / "lab-settings")
    assert overrides["@jupyter-widgets/jupyterlab-manager:plugin"]["saveState"] is True


def test_start_remembers_the_workspace_and_lab_finds_it(tmp_path):
    memo = tmp_path / "remembered"
    started = ol("start", "L10.8", "--workspace", "work", workspace=tmp_path,
                 env={"OL_LAST_WORKSPACE_FILE": str(memo)})
    assert started.code == 0, started.text
    assert memo.read_text() == f"{tmp_path / 'work'}\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _, settings = dry_run(cwd=elsewhere, memo=memo)  # no --workspace, nothing started here
    assert settings["OL_WORKSPACE"] == str(tmp_path / "work")


def test_start_remembers_nothing_when_told_not_to(tmp_path):
    assert ol("start", "L10.8", workspace=tmp_path).code == 0  # ol_helpers turns remembering off
    assert not (ROOT / ".ol-workspace").exists() or str(tmp_path) not in (ROOT / ".ol-workspace").read_text()


def test_start_has_a_plain_jupyter_lab_save_the_widget_state_too(tmp_path):
    """ol start makes saveState a default of the environment's JupyterLab (``overrides.d``), which
    ol lab keeps under its own settings, with the installation's other defaults."""
    app = tmp_path / "jupyterlab-app"
    env = {"JUPYTERLAB_DIR": str(app)}
    assert ol("start", "L10.8", "--workspace", "work", workspace=tmp_path, env=env).code == 0
    written = json.loads((app / "settings" / "overrides.d" / "tinyllm-course.json").read_text())
    assert written == {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
    theirs = {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}
    (app / "settings" / "overrides.json").write_text(json.dumps(theirs))
    ran = ol("lab", "--workspace", "work", "--dry-run", workspace=tmp_path, env=env)
    assert ran.code == 0, ran.text
    overrides = json.loads((tmp_path / "work" / ".ol" / "lab-settings" / "overrides.json").read_text())
    assert overrides == {**theirs, **written}
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    ran = ol("start", "L10.9", "--workspace", "work", workspace=tmp_path, env={"JUPYTERLAB_DIR": str(blocked / "app")})
    assert ran.code == 0 and "a plain jupyter lab will not save the widgets' state" in ran.out, ran.text
