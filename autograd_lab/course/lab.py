"""``autograd-lab lab``: JupyterLab on the student's workspace, as ``make lab`` opens it.

The command brings ``work/`` up to date (``workspace.sync``), gives JupyterLab the
course's settings, and replaces itself with ``python -m jupyterlab`` on ``work/`` with
IPC kernels (private to the user; ipykernel has no plain-TCP warning to print).
Arguments it does not know go to JupyterLab (``--no-browser``, ``--port=...``).

This module is also a Jupyter server extension, loaded by name on that command line:

- it prints the course updates still waiting after JupyterLab's own start-up lines, so
  they are the last lines in the terminal, not one among twenty-five;
- it refuses a save from a tab that still shows a notebook the workspace has since
  replaced (``reset``, or a refreshed copy).  JupyterLab asks "File Changed: overwrite
  or revert?" first; "Overwrite" would silently put the old notebook back over the fresh
  copy, so the save is refused with a message that says where the old copy is.
"""

import json
import os
import sys
from pathlib import Path

from autograd_lab.course import workspace

# Choices a student would otherwise click through, as JupyterLab defaults for this
# environment (overrides.d, one file per package); the student can still change them.
SETTINGS = {
    # "Would you like to get notified about official Jupyter news?" covered the feedback
    # in the first minutes; the course is used offline, too.
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    # work/COURSE-UPDATES.md opens rendered, not as Markdown source.
    "@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Markdown Preview"}},
}


def settings_file():
    app_dir = os.environ.get("JUPYTERLAB_DIR") or os.path.join(sys.prefix, "share", "jupyter", "lab")
    return Path(app_dir) / "settings" / "overrides.d" / "autograd-lab.json"


def install_settings():
    path, text = settings_file(), json.dumps(SETTINGS, indent=1) + "\n"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def jupyter_command(work, extra=(), open_file=None):
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={work}",
               "--KernelManager.transport=ipc", f"--ServerApp.jpserver_extensions={__name__}=True",
               # No language servers are installed: without the search, start-up is faster and
               # its "Skipped non-installed server(s)" line does not bury the course's notice.
               "--LanguageServerManager.autodetect=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # containers and Colab often run as root
    command += list(extra)
    if open_file is not None:
        command.append(str(open_file))  # JupyterLab opens it in the browser tab it starts with
    return command


def main(args):
    course, work = workspace.locate(args.course, args.work)
    try:
        events = workspace.sync(course, work)
    except workspace.WorkspaceError as error:
        print(f"autograd-lab lab: {error}", file=sys.stderr)
        return 1
    for event in events:
        if event.kind != "update":  # updates are printed last, once JupyterLab is up
            print(event.message())
    install_settings()
    notice = work / workspace.NOTICE
    newly_announced = any(e.kind == "update" and e.new for e in events)
    command = jupyter_command(work.resolve(), args.jupyter_args, notice.resolve() if newly_announced else None)
    sys.stdout.flush()
    if os.name == "nt":  # no exec there: run JupyterLab as a child and pass its status on
        import subprocess
        return subprocess.call(command)
    os.execv(command[0], command)


# ---- the server extension ------------------------------------------------------------

def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp):
    serverapp.contents_manager.register_pre_save_hook(refuse_stale_save)
    root = Path(serverapp.root_dir)
    serverapp.io_loop.add_callback(print_waiting_updates, root)


def print_waiting_updates(work):
    updates = workspace.pending_updates(work)
    if not updates:
        return
    rule = "-" * 78
    notices = "\n\n".join(workspace.update_notice(u.name, u) for u in updates)
    print(f"\n{rule}\n{notices}\n(The same notice is in {workspace.shown(work / workspace.NOTICE)}, "
          f"in JupyterLab's file browser.)\n{rule}",
          flush=True)


def replaced_mark(notebook):
    return ((notebook or {}).get("metadata") or {}).get(workspace.MARK)


def refuse_stale_save(model, path, contents_manager, **kwargs):
    """Pre-save hook: a notebook the workspace replaced can only be saved from a tab opened after that."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    try:
        on_disk = Path(contents_manager.root_dir, *path.strip("/").split("/"))
        with open(on_disk, encoding="utf-8") as file:
            mark = replaced_mark(json.load(file))
    except (OSError, ValueError):
        return  # a new file, or one we cannot read: nothing to protect
    if not isinstance(mark, dict) or replaced_mark(model["content"]) == mark:
        return
    from tornado.web import HTTPError  # jupyter_server turns it into the message JupyterLab shows

    name = Path(path).name
    previous = f"Your previous copy is {mark['previous']}. " if mark.get("previous") else ""
    raise HTTPError(409, (
        f"Not saved: {name} was replaced by a fresh copy ({mark.get('why', 'autograd-lab')}, "
        f"{mark.get('copy', '')}), and this tab still shows the notebook from before. {previous}"
        f"Close this tab and open {name} again. To keep what this tab shows, use "
        "File > Save Notebook As... with another name."))
