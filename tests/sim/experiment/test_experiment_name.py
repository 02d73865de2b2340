"""An experiment's name is the folder its results go to by default: a plain name, refused in one line otherwise."""
import pytest

from engine.errors import SpecError
from sim.experiment.config import load_experiment
from tests.helpers.configs import tiny


@pytest.mark.parametrize("name", ["", "' '", "null", "../../elsewhere", "a/b", "'..'", "[a]", "true"])
def test_a_name_that_is_no_plain_folder_name_is_refused_naming_the_key(write_config, name):
    with pytest.raises(SpecError) as caught:
        load_experiment(write_config(tiny(name=name)))
    assert caught.value.key == "name" and "plain name" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name, expected", [("tiny", "tiny"), ("fig12a-opt13b", "fig12a-opt13b"), ("2024", "2024")])
def test_a_plain_name_is_kept(write_config, name, expected):
    assert load_experiment(write_config(tiny(name=name))).name == expected
