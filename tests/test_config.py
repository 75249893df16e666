"""params.yaml schema: defaults, strict validation with messages naming key/value/rule, overlays."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from selfevolve.config import Params, ParamsError, load_params
from selfevolve.inputs import InputError, parse_assignments

ROOT = Path(__file__).resolve().parents[1]


def test_params_yaml_matches_schema_defaults():
    assert load_params(ROOT / "params.yaml").model_dump(mode="json") == Params().model_dump(mode="json")


def test_params_yaml_writes_out_every_field(tmp_path, caplog):
    """DVC tracks the values in params.yaml only (the schema is not a stage dependency): a field
    left to its default would not rerun the stages that read it when the default changes. A
    stage run warns about a file that leaves fields out."""
    from selfevolve.cli.stages import run_stage_or_fail
    from selfevolve.stages.registry import get
    from selfevolve.stages.runner import defaults_left_out

    written = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert defaults_left_out(written, load_params(ROOT / "params.yaml")) == []
    del written["sage"]["edge_share"], written["rl"]
    partial = tmp_path / "params.yaml"
    partial.write_text(yaml.safe_dump(written))
    assert defaults_left_out(written, load_params(partial)) == ["sage.edge_share", "rl"]
    run_stage_or_fail(get("seeds"), None, partial, None, tmp_path, track=False)
    assert "leaves 2 field(s) to the schema's defaults (sage.edge_share, rl)" in caplog.text


@pytest.mark.parametrize("patch, key, fragment", [
    ({"sage": {"alpah": 0.7}}, "sage.alpah", "unknown key"),
    ({"sage": {"alpha": 1.7}}, "sage.alpha", "less than or equal to 1"),
    ({"rl": {"steps": "many"}}, "rl.steps", "valid integer"),
    ({"model": {"backend": "tgi"}}, "model.backend", "'hf', 'vllm' or 'openai'"),
    ({"cycles": {"c1": {"init": "base"}, "c2": {"init": "base"}}}, "cycles", "must start from 'c1'"),
    ({"sage": {"solver_plan_weight": 0.5}}, "sage", "sum to 1"),
])
def test_bad_params_name_key_value_and_rule(tmp_path, patch, key, fragment):
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section, val in patch.items():
        if isinstance(val, dict) and isinstance(data.get(section), dict) and section != "cycles":
            data[section].update(val)
        else:
            data[section] = val
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError) as exc:
        load_params(p)
    msg = str(exc.value)
    assert key in msg and fragment in msg, msg


def test_malformed_yaml_and_missing_file(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("sage: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(p)
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_overlay_and_overrides(tmp_path):
    ov = tmp_path / "preset.yaml"
    ov.write_text("model: {base: Qwen/Qwen2.5-7B-Instruct, backend: vllm}\n")
    p = load_params(ROOT / "params.yaml", overlays=[ov], overrides={"sage.alpha": 0.6})
    assert p.model.backend == "vllm" and p.model.base == "Qwen/Qwen2.5-7B-Instruct" and p.sage.alpha == 0.6
    assert p.model.dtype == "float32"  # untouched keys keep params.yaml values


def test_presets_validate():
    for preset in sorted((ROOT / "configs").glob("*.yaml")):
        load_params(ROOT / "params.yaml", overlays=[preset])


@pytest.mark.slow
def test_cli_rejects_bad_params_before_writing(tmp_path):
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seeds"]["size"] = -3
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    r = subprocess.run([sys.executable, "-m", "selfevolve", "seeds", "--root", str(tmp_path), "--params",
                        str(tmp_path / "params.yaml"), "--no-track"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert "seeds.size" in r.stderr and "-3" in r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["params.yaml"]


def test_apply_preset_keeps_comments_and_validates(tmp_path):
    from selfevolve.config import apply_preset

    p = tmp_path / "params.yaml"
    p.write_text((ROOT / "params.yaml").read_text())
    merged = apply_preset(p, ROOT / "configs" / "paper-tiny.yaml")
    assert merged.seeds.set == "paper" and load_params(p) == merged
    text = p.read_text()
    assert "# Every knob of a campaign" in text
    assert "  ablation: {critic: true, planner: true, train_challenger: true, train_solver: true}\n" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text("sage: {alpha: 3}\n")
    before = p.read_text()
    with pytest.raises(ParamsError, match="sage.alpha"):
        apply_preset(p, bad)
    assert p.read_text() == before


def test_a_preset_replaces_the_cycles_whole(tmp_path):
    from selfevolve.config import apply_preset

    p = tmp_path / "params.yaml"
    p.write_text((ROOT / "params.yaml").read_text())
    assert set(load_params(p).cycles) == {"c1", "c2"}
    merged = apply_preset(p, ROOT / "configs" / "smollm2-135m.yaml")
    assert set(merged.cycles) == {"c1"} and set(load_params(p).cycles) == {"c1"}  # not merged into c1 + c2
    assert merged.model.worked_examples and merged.model.base.startswith("pypi:") and merged.model.dtype == "auto"
    assert merged.model.batch_size == 32 and merged.sampling.max_new_tokens == 256  # sections still merge key by key
    assert load_params(ROOT / "params.yaml", overlays=[ROOT / "configs" / "smollm2-135m.yaml"]).cycles.keys() == {"c1"}


# -- strict types (issue 24, row 8) ----------------------------------------------------------

@pytest.mark.parametrize("key, value, rule", [
    ("sage.solver_samples", True, "valid integer"),
    ("rl.steps", "3", "valid integer"),
    ("sage.alpha", "0.7", "valid number"),
    ("bootstrap.learning_rate", False, "valid number"),
    ("mass.enabled", 1, "valid boolean"),
    ("sage.ablation.critic", "false", "valid boolean"),
    ("placement.shards", {"solve": "2"}, "valid integer"),
])
def test_params_types_are_strict(key, value, rule):
    with pytest.raises(ParamsError) as exc:
        load_params(ROOT / "params.yaml", overrides={key: value})
    assert key.split(".")[-1] in str(exc.value) and rule in str(exc.value), str(exc.value)


def test_an_integer_is_still_a_number():
    assert load_params(ROOT / "params.yaml", overrides={"sage.alpha": 1, "sage.frontier_band": [0, 1]}).sage.alpha == 1.0


def test_command_line_overrides_are_typed_by_yaml_and_named_when_bad():
    overrides = parse_assignments(["rl.steps=5", "sage.ablation.critic=false", "sage.frontier_band=[0.1, 0.9]"])
    assert overrides == {"rl.steps": 5, "sage.ablation.critic": False, "sage.frontier_band": [0.1, 0.9]}
    p = load_params(None, overrides=overrides)  # None: the schema's defaults (what params.yaml holds)
    assert p.rl.steps == 5 and p.sage.ablation.critic is False and p.sage.frontier_band == (0.1, 0.9)
    assert load_params(ROOT / "params.yaml", overrides=overrides) == p
    for bad, msg in (["rl.steps"], "KEY=VALUE"), (["=3"], "KEY=VALUE"), (["rl.steps=[1"], "not valid YAML"):
        with pytest.raises(InputError, match=msg):
            parse_assignments(bad)
    with pytest.raises(ParamsError, match="'seed' is not a section"):
        load_params(None, overrides={"seed.x": 1})
    with pytest.raises(ParamsError, match="rl.nope: unknown key"):
        load_params(None, overrides={"rl.nope": 1})


@pytest.mark.parametrize("preset", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_preset_validates_over_params_yaml(preset):
    load_params(ROOT / "params.yaml", overlays=[ROOT / "configs" / preset])


def test_params_yaml_validates_as_written():
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert load_params(ROOT / "params.yaml").model_dump(mode="json")["seed"] == data["seed"]


def test_an_exponent_float_is_a_number(tmp_path):
    """YAML 1.1 (PyYAML) reads 1e-05 as a string; ruamel (apply_preset) and DVC write floats so."""
    p = tmp_path / "params.yaml"
    p.write_text((ROOT / "params.yaml").read_text().replace("learning_rate: 0.0002 ", "learning_rate: 1e-05 "))
    assert load_params(p).rl.learning_rate == 1e-05


def test_engine_configs_take_their_fields_from_the_campaign_params():
    """Each engine's config (``SolveConfig``, ``TrainConfig``) carries what the campaign's params say,
    field by field, and refuses a field it does not know."""
    import pydantic

    from selfevolve.config import Params
    from selfevolve.evaluation.solve import SolveConfig
    from selfevolve.training.config import TrainConfig

    p = Params()
    p.sampling.temperature, p.sampling.top_p, p.sampling.force_answer_tokens = 0.7, 0.9, 12
    p.evaluation.max_new_tokens, p.evaluation.batch_size = 33, 7
    p.model.worked_examples, p.model.max_model_len, p.model.train_precision = True, 300, "float32"
    p.seeds.set, p.seed, p.rl.steps, p.verifiers.math_timeout_s = "tiny-code", 9, 17, 2.5
    p.sage.alpha, p.model.lora.enabled, p.sampling.max_new_tokens = 0.3, True, 44
    s = SolveConfig.from_params(p)
    assert (s.temperature, s.top_p, s.force_answer_tokens, s.max_new_tokens, s.batch_size) == (0.7, 0.9, 12, 33, 7)
    assert s.worked_examples and s.seed_set == "tiny-code" and s.verifiers.math_timeout_s == 2.5
    t = TrainConfig.from_params(p)
    assert (t.seed, t.rl.steps, t.max_model_len, t.train_precision, t.temperature, t.max_new_tokens) == (9, 17, 300, "float32", 0.7, 44)
    assert t.lora.enabled and t.sage.alpha == 0.3 and t.verifiers.math_timeout_s == 2.5
    with pytest.raises(pydantic.ValidationError, match="sampling_temperature"):
        SolveConfig(**s.model_dump(), sampling_temperature=0.5)
    with pytest.raises(pydantic.ValidationError, match="max_model_len"):  # no default of its own
        TrainConfig(**t.model_dump(exclude={"max_model_len"}))
