"""World resolution (loader/world.py): arguments first, then the detector passed in, then the
environment."""

import pytest

from datapipe.errors import ConfigError
from datapipe.loader.world import World, resolve_world


def test_arguments_then_detector_then_environment_then_a_world_of_one():
    env = {"RANK": "1", "WORLD_SIZE": "4"}
    assert resolve_world(2, 3, env, lambda: (0, 2)) == World(2, 3)
    assert resolve_world(None, None, env, lambda: (1, 2)) == World(1, 2)
    assert resolve_world(None, None, env, lambda: None) == World(1, 4)  # no process group
    assert resolve_world(None, None, env) == World(1, 4)
    assert resolve_world(None, None, {}) == World(0, 1)


@pytest.mark.parametrize(
    "rank, world_size, env",
    [(1, None, {}), (None, None, {"RANK": "a", "WORLD_SIZE": "2"}), (3, 3, {})],
)
def test_a_world_that_cannot_be_is_a_config_error(rank, world_size, env):
    with pytest.raises(ConfigError):
        resolve_world(rank, world_size, env)
