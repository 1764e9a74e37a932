"""The one entry point of every helper on a command line: `python -I -S _start.py HELPER …`,
and of the verbs (`cli`) where no entry script written by bin/setup is at hand (bin/lnk-sandbox
without a venv).

A sandbox start pays for every helper's interpreter start, and `site` is the biggest
part of it here (an editable install's import hook alone took 17 ms), so helpers run
without it (-S) and isolated (-I: no PYTHONPATH, no user site, so the caller's
environment cannot swap our code). This file puts the folder that holds our packages
(a checkout, or site-packages) first on sys.path and runs the helper.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if sys.argv[1:2] == ["--site-packages"] and len(sys.argv) > 2:
    # A helper that needs libraries besides ours (the proxy: h11) is told where they are.
    sys.argv.pop(1)
    sys.path.append(sys.argv.pop(1))
_HELPER = sys.argv.pop(1) if len(sys.argv) > 1 else ""
if _HELPER == "launch":
    from lnk_wrap.launch import main
elif _HELPER == "init":
    from lnk_wrap.init import main
elif _HELPER == "exec-watch":
    from lnk_execwatch.main import main
elif _HELPER == "proxy":
    from lnk_proxy.main import main
elif _HELPER == "relay":
    from lnk_relay.main import main
elif _HELPER == "dns-helper":
    from lnk_dns.helper import main
elif _HELPER == "ask":
    from lnk_ask.main import main
elif _HELPER == "cli":
    from lnk_wrap.cli import main
else:
    sys.stderr.write(f"lnk-sandbox: no helper named {_HELPER!r}\n")
    sys.exit(125)
main()
