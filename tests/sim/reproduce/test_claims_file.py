"""claims.yaml, the paper's claims as data: each claim's text as printed, a reader of a known kind, and a
file that names a reader or arguments the code does not have refused with the claim it is in."""
import pandas as pd
import pytest

from engine.errors import SpecError
from sim.reproduce.claims import CLAIMS, CLAIMS_FILE, READERS, load_claims
from sim.reproduce.results import Results


def test_the_shipped_file_holds_the_claims_in_the_tables_order():
    claims = load_claims()
    assert [c.id for c in claims][:2] == ["fig2.orca_token_share", "fig2.vllm_waste"] and len(claims) == 38
    by_id = {c.id: c for c in claims}
    assert by_id["fig13.orca_max_seven"].paper == "7.00"  # the printed text, never a number YAML read
    assert by_id["fig12.175b_less_pronounced"].arguments["over"] == ["Orca (Oracle)", "Orca (Pow2)"]
    assert by_id["fig17.vs_orca"].arguments["over"] == ["Orca (Max)", "Orca (Pow2)", "Orca (Oracle)"]
    assert {c.kind for c in CLAIMS} == set(READERS)  # every reader reads a claim


def test_a_reader_reads_the_arguments_the_file_gives_it(tmp_path):
    text = CLAIMS_FILE.read_text().replace("within: [20.4, 38.2]", "within: [90, 100]")
    (tmp_path / "claims.yaml").write_text(text)
    shares = {"kv_token_share": [0.3], "kv_reserved_share": [0.1], "kv_internal_frag_share": [0.1],
              "kv_external_frag_share": [0.1], "kv_idle_share": [0.0]}
    frame = pd.concat([pd.DataFrame({"panel": "", "series": "", "scale": "hand-made", "system": s, "rate": [2.0],
                                     "normalized_latency": [0.1], "seed": 0, **shares})
                       for s in ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM")])
    results = Results({"fig2": frame})
    assert CLAIMS[0].read(results).lands == "yes"  # 30% is in 20.4-38.2%
    assert load_claims(tmp_path / "claims.yaml")[0].read(results).lands == "no"  # and not in 90-100%


@pytest.mark.parametrize("old, new, message", [
    ("kind: kv_waste,", "kind: kv_wast,", "claims[1] (fig2.vllm_waste).read.kind: 'kv_wast' is not one of"),
    ("kind: kv_waste, system: vLLM,", "kind: kv_waste, system: vLLM, panel: a,",
     "claims[1] (fig2.vllm_waste).read: not the arguments of kind kv_waste"),
    ('    paper: "< 4%"\n', "", "claims[1]: a claim has exactly the keys id, figure, basis, statement, paper, read"),
    ("kind: capacity_in_axes, figure: fig12}", "kind: capacity_in_axes, figure: fig20}",
     "claims[9] (fig12.capacity_in_axes): the id and read.figure name a reproduced figure, one of fig2, fig12"),
])
def test_a_claim_the_code_cannot_read_is_refused_naming_it(tmp_path, old, new, message):
    text = CLAIMS_FILE.read_text()
    assert old in text
    (tmp_path / "claims.yaml").write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError) as err:
        load_claims(tmp_path / "claims.yaml")
    assert message in str(err.value) and str(tmp_path / "claims.yaml") in str(err.value)
    assert "\n" not in str(err.value)
