"""The exec watch's pieces that need no sandbox: path resolution, the judge, learn's offer."""

from __future__ import annotations

import os

from lnk_common.wirelog import printable
from lnk_execwatch.judge import (
    Commands,
    interpreter_of,
    is_interpreter,
    offer,
    program_given_to_loader,
)
from lnk_execwatch.main import read_head_inside, resolve_inside

DASH = os.path.realpath("/bin/sh")


def test_resolve_inside_follows_links_and_never_climbs_above_the_root() -> None:
    me = os.getpid()
    assert resolve_inside(me, "/bin/sh") == DASH
    assert resolve_inside(me, "/../../../bin/sh") == DASH
    assert resolve_inside(me, "/usr/bin/../../bin/./sh") == DASH
    assert resolve_inside(me, "/usr/bin") == "/usr/bin"
    assert resolve_inside(me, "/no/such/file") is None
    assert resolve_inside(me, "/") == "/"


def test_read_head_inside_reads_regular_files_only() -> None:
    me = os.getpid()
    assert read_head_inside(me, DASH)[:4] == b"\x7fELF"  # type: ignore[index]
    assert read_head_inside(me, "/usr/bin") is None
    assert read_head_inside(me, "/dev/null") is None
    assert read_head_inside(me, "/no/such") is None


def test_the_judge_allows_listed_files_folders_and_the_loader() -> None:
    commands = Commands(("/usr/bin/git", "/opt/tools"), ("/lib/ld.so",))
    assert commands.allows("/usr/bin/git")
    assert commands.allows("/opt/tools/x/y")
    assert commands.allows("/lib/ld.so")
    assert not commands.allows("/usr/bin/gitk")
    assert not commands.allows("/opt/toolsx")


def test_interpreter_of_reads_the_shebang_as_the_kernel_does() -> None:
    assert interpreter_of(b"#!/bin/sh\necho") == "/bin/sh"
    assert interpreter_of(b"#! \t/usr/bin/env python3 -u\n") == "/usr/bin/env"
    assert interpreter_of(b"#!\n") is None
    assert interpreter_of(b"\x7fELF") is None


def test_program_given_to_loader_skips_its_options() -> None:
    assert program_given_to_loader(["ld.so", "/tmp/x", "-a"]) == "/tmp/x"
    assert program_given_to_loader(["ld.so", "--library-path", "/l", "--verify", "./y"]) == "./y"
    assert program_given_to_loader(["ld.so", "--argv0", "z"]) is None


def test_interpreters_are_known_by_name() -> None:
    for path in ("/usr/bin/python3.11", "/usr/bin/bash", "/usr/bin/node", "/usr/bin/perl5.36",
                 "/usr/bin/dash", "/usr/bin/gawk"):
        assert is_interpreter(path), path
    for path in ("/usr/bin/git", "/usr/bin/cc", "/usr/bin/make", "/usr/bin/shred"):
        assert not is_interpreter(path), path


def test_learn_never_offers_what_the_sandbox_could_replace() -> None:
    offered, refused = offer(
        ["/usr/bin/git", "/work/build/tool", "/tmp/x", "/usr/bin/git", "/usr/bin/cc"],
        listed=("/usr/bin/cc",), replaceable=("/work", "/tmp"))
    assert offered == ["/usr/bin/git"]
    assert [path for path, _ in refused] == ["/work/build/tool", "/tmp/x"]


def test_printable_escapes_control_characters() -> None:
    assert printable("/tmp/a\nb\x1b[2J") == "/tmp/a\\x0ab\\x1b[2J"
    assert printable("/tmp/é") == "/tmp/é"
