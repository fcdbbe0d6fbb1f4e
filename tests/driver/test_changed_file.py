"""A file replaced between passes is named as changed (issue 21.6), not as corrupt.

``optimize --no-cache`` reads the files again on every pass; a file replaced in the
meantime (another ROOT file under the same name) has another ROOT UUID than the one the
driver opened: one line saying so, on the pass that meets it.
"""

from __future__ import annotations

import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.errors import InputError
from tests.chunked_helpers import NANOAOD_WARNINGS, analysis_config
from tests.faults_helpers import jets, write_nano

pytestmark = NANOAOD_WARNINGS


@pytest.mark.parametrize("n_new", [60, 30], ids=["same size", "fewer events"])
def test_a_replaced_file_is_named_as_changed(tmp_path, n_new) -> None:
    path = write_nano(tmp_path / "d.root", jets(1))
    cfg = config_from_dict(analysis_config({"d": {"files": [str(path)], "weight": "genWeight"}}))
    with Evaluator(cfg, cache=False, chunksize=30) as ev:
        ev.run(order=0)
        write_nano(tmp_path / "new.root", jets(2, n_new)).replace(path)
        with pytest.raises(InputError) as info:
            ev.run(order=0)
    text = str(info.value)
    assert text.startswith(f"{path}, entries 0-30 (datasets.d): the file changed since it "
                           "was opened (ROOT UUID "), text
    assert "\n" not in text
