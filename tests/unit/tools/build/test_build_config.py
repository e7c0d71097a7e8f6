"""build's Config: an --out-dir that cannot be a directory is the same ConfigError from
keyword arguments, from a mapping, from build() given the path, and a usage error (exit 2)
naming --out-dir from the CLI, before anything compiles."""

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools import build
from helpers import same_config_error


@pytest.mark.parametrize("where", ["{file}/objs", "/proc/ebpfkit-objs/x"])
def test_a_directory_that_cannot_be_made_is_one_error_from_every_entry(capsys, tmp_path, where):
    regular = tmp_path / "a-file"
    regular.write_text("")
    path = where.format(file=regular)
    error = same_config_error(capsys, build.Config, {"out_dir": path}, ["build", "--out-dir", path],
                              "'--out-dir'", f"cannot create directory {path}")
    with pytest.raises(ConfigError) as direct:
        build.build(path)
    assert str(direct.value) == str(error)
