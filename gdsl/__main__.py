"""The `gdsl` command's process: the console script (pyproject.toml,
`gdsl = "gdsl.__main__:entry"`) and `python -m gdsl`.

Small on purpose: this is the first of gdsl's code the process runs, and it
imports gdsl.cli (and through it argparse, torch, sympy, numba) inside its
`try`, so a Ctrl-C at any moment says `gdsl: interrupted` and exits 130.
Was: the console script imported gdsl.cli itself, and a Ctrl-C in its first
~50 ms (gdsl.cli's imports, its argument parser) printed a Python traceback
and the process died by SIGINT (status -2). What comes before (the
interpreter's own start and `site`, a few ms) is Python's, as for any
program."""
import sys


def entry() -> None:
    code, said = 130, "gdsl: interrupted"
    try:
        from gdsl.runtime import signals, startup
        startup.hold()   # while it imports torch, sympy, numba (gdsl/runtime/startup.py)
        startup.ignore_sigint_at_teardown()
        signals.interrupt_after_imports()   # (raised inside numpy's or torch's import: exit 3, or -6)
        from gdsl.runtime.files import tolerant_stdout
        tolerant_stdout()   # a file name that is not UTF-8 on a UTF-8-only stdout (was: exit 3)
        from gdsl import cli
        cli._PROCESS["cap_memory"] = True   # the process is gdsl's own (not a caller's: tests, notebooks)
        code, said = cli.main(), None   # its own boundary says what happened (errors, `gdsl: interrupted`)
    except KeyboardInterrupt:   # before that boundary: gdsl.cli's imports, the parser, or just after it
        pass
    except SystemExit as e:   # argparse's: --help, --version, a usage error
        if e.code is not None and not isinstance(e.code, int):
            raise
        code, said = e.code or 0, None
    except BaseException as e:   # SIGTERM / SIGHUP to `gdsl run` just after its boundary
        if type(e).__name__ != "Terminated":
            raise
        code, said = 128 + e.signum, f"gdsl: terminated ({e.name})"
    while True:
        try:
            from gdsl.runtime import signals, startup   # (imported above, unless the Ctrl-C came first)
            signals.forget_pending()   # one that waited for an import to end: the status is decided
            startup.keep_status(code)   # a signal from here on does not change the status
            break
        except KeyboardInterrupt:   # a second Ctrl-C before the handlers were in place
            pass
    if said is not None and sys.stderr is not None:
        try:
            print(said, file=sys.stderr, flush=True)
        except (OSError, ValueError):   # stderr closed or gone: the status says it
            pass
    startup.before_exit()
    sys.exit(code)


if __name__ == "__main__":
    entry()
