"""The container's command line (tests/support/nspawn.py) for a checkout anywhere under /tmp:
systemd-nspawn makes an overlay's mount point with one mkdir inside a container whose /tmp
is empty, so a checkout two levels down (``/tmp/a/fleetwatch``) failed to boot with
"Creating mount point for overlay ... No such file or directory"."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.nspawn import Container

#: what exists inside before the overlays are mounted: the container's own empty /tmp, and
#: /var/tmp of the read-only root underneath
INSIDE = (Path("/tmp"), Path("/var/tmp"))


def overlays(argv: list[str]) -> list[tuple[Path, Path]]:
    pairs = []
    for arg in argv:
        if arg.startswith("--overlay="):
            lower, upper, where = arg.removeprefix("--overlay=").split(":")
            assert upper == ""                    # a throwaway upper layer
            pairs.append((Path(lower), Path(where)))
    return pairs


@pytest.mark.parametrize("checkout", ["/tmp/fleetwatch", "/tmp/a/fleetwatch",
                                      "/tmp/a/b/fleetwatch", "/var/tmp/ci/x/fleetwatch"])
def test_every_overlay_has_a_mount_point_and_shows_the_checkout(tmp_path, checkout):
    repo = Path(checkout)
    argv = Container(tmp_path / "log", shared=(repo, repo / ".venv")).argv()
    pairs = overlays(argv)
    assert pairs, argv
    for i, (lower, where) in enumerate(pairs):
        assert lower == where                     # at the host's own path
        # one mkdir makes it: in what the container has, or in an overlay mounted before
        assert where.parent in INSIDE or any(
            where.parent.is_relative_to(before) for _, before in pairs[:i]), argv
    for shown in (repo, repo / ".venv"):
        assert any(shown.is_relative_to(where) for _, where in pairs), (shown, argv)
    assert len({where for _, where in pairs}) == len(pairs)    # each once


def test_directories_outside_tmp_are_not_overlaid(tmp_path):
    argv = Container(tmp_path / "log", shared=(Path("/work/fleetwatch"),)).argv()
    assert overlays(argv) == []
    assert argv[0] == "systemd-nspawn" and argv[-1] == "-b"
