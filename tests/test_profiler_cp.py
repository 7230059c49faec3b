"""The analytic profiler's context parallelism (docs/context-parallelism.md): per (t, e, c, b)
the figures of b·s/c tokens, the attention core's FLOPs ÷ c, the ring and all-to-all volumes,
and the widths it refuses or drops."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from nest_cp.cli import main
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import CollectiveGroup, CpComm, IntraConfig
from nest_cp.profiles.presets import DEVICES, MODELS, build_instance
from nest_cp.profiles.profiler import AttentionKind, ProfileOptions, profile_workload

DEVICE = DEVICES["h100-sxm"]
LLAMA = MODELS["llama3-70b"]  # 64 heads, 8 kv heads of 128
SEQ = 8192


def _blocks(configs, options=None, model=LLAMA, seq=SEQ):
    return profile_workload(model, DEVICE, seq, (1, 2), configs, options or ProfileOptions())


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_token_proportional_figures_are_those_of_s_over_c_tokens(tp):
    """At c = 2 every token-proportional figure of a block (act, ckpt, out, TP collective
    bytes) is exactly half of c = 1's at the same (t, b), and so are the model FLOPs (the
    GEMMs see half the tokens, the attention core half the queries against all keys);
    the parameters do not change, nor the head's output (the loss, one fp32 number)."""
    one, two = IntraConfig(tp=tp), IntraConfig(tp=tp, cp=2)
    workload = _blocks((one, two))
    for layer in workload.layers:
        for microbatch in (1, 2):
            whole, half = layer.profile(one, microbatch), layer.profile(two, microbatch)
            assert half.params == whole.params
            assert 2 * half.ckpt_bytes == whole.ckpt_bytes
            assert (half.out_bytes == whole.out_bytes == 4) if layer.name == "head" \
                else 2 * half.out_bytes == whole.out_bytes
            assert 2 * half.act_bytes == whole.act_bytes
            assert [2 * c.volume_bytes for c in half.collectives] == \
                [c.volume_bytes for c in whole.collectives]
            assert 2 * half.flops == pytest.approx(whole.flops, rel=1e-12)


def test_ring_volume_is_the_k_and_v_one_rank_holds():
    """cp_kv_bytes = 2·b·(s/c)·(kv_heads/t)·head_dim·2 bytes on every block, 0 on the
    embedding and head; attn_fwd_s / attn_bwd_s are the core's part of fwd_s / bwd_s."""
    for tp, cp, microbatch in ((1, 2, 1), (2, 4, 2), (8, 2, 1)):
        config = IntraConfig(tp=tp, cp=cp)
        workload = _blocks((config,))
        block = workload.layers[1].profile(config, microbatch)
        assert block.cp_kv_bytes == 2 * microbatch * (SEQ // cp) * (8 // tp) * 128 * 2
        assert block.cp_a2a_bytes == 0
        assert 0 < block.attn_fwd_s < block.fwd_s and 0 < block.attn_bwd_s < block.bwd_s
        for layer in (workload.layers[0], workload.layers[-1]):
            edge = layer.profile(config, microbatch)
            assert edge.cp_kv_bytes == 0 and edge.attn_fwd_s == 0


def test_c1_profiles_carry_no_context_fields():
    """A c = 1 profile is as before: no attention split, no ring volume."""
    block = _blocks((IntraConfig(),)).layers[1].profile(IntraConfig(), 1)
    assert block.attn_fwd_s is None and block.cp_kv_bytes == 0 and block.cp_a2a_bytes == 0


def test_a2a_volume_is_q_k_v_and_output():
    """Under a2a, cp_a2a_bytes = (s/c)·b·(q + k + v + out widths on the rank)·2 bytes."""
    config = IntraConfig(tp=2, cp=2)
    block = _blocks((config,), ProfileOptions(cp_comm=CpComm.A2A)).layers[1].profile(config, 1)
    widths = (64 // 2) * 128 * 2 + (8 // 2) * 128 * 2  # q and output, k and v
    assert block.cp_a2a_bytes == (SEQ // 2) * widths * 2
    assert block.cp_kv_bytes == 0


def test_sequence_not_divisible_by_2c_is_refused():
    """Megatron slices the sequence into 2c chunks: s = 8,190 with c = 2 is refused naming
    training.context_parallel."""
    with pytest.raises(InstanceFormatError) as raised:
        _blocks((IntraConfig(cp=2),), seq=8190)
    assert raised.value.field == "training.context_parallel"


def test_materialized_attention_with_context_parallelism_is_refused():
    """Context parallelism runs through fused attention: materialised scores are refused."""
    with pytest.raises(InstanceFormatError) as raised:
        _blocks((IntraConfig(cp=2),), ProfileOptions(attention=AttentionKind.MATERIALIZED))
    assert raised.value.field == "attention"


def test_a2a_drops_tensor_widths_whose_heads_do_not_split(caplog):
    """Under a2a, t = 8 leaves one kv head per tensor rank, which two context ranks cannot
    split: building the instance drops (t = 8, c = 2) with a logged note and keeps the
    others; profiling that pair directly is refused."""
    options = ProfileOptions(cp_comm=CpComm.A2A)
    with caplog.at_level(logging.WARNING):
        built = build_instance(LLAMA, 64, "dgx-h100-superpod", seq_len=SEQ, global_batch=64,
                               tp_widths=(4, 8), cp_widths=(1, 2), options=options)
    configs = {(c.tp, c.cp) for c in built.workload.configs}
    assert configs == {(4, 1), (4, 2), (8, 1)}
    assert "dropped tp=8 with cp=2" in caplog.text
    assert built.training.context_parallel == (1, 2) and built.training.cp_comm is CpComm.A2A
    with pytest.raises(InstanceFormatError):
        _blocks((IntraConfig(tp=8, cp=2),), options)


def test_instance_new_writes_context_widths(tmp_path):
    """`instance new --context-parallel 1,2 --cp-comm p2p` profiles both widths and writes
    training.context_parallel; a width the sequence cannot take exits 2 naming the field."""
    out = tmp_path / "cp.json"
    runner = CliRunner()
    made = runner.invoke(main, ["instance", "new", "--model", "llama3-70b", "--devices", "16",
                                "--network", "dgx-h100-superpod", "--seq-len", "8192",
                                "--tp-widths", "8", "--context-parallel", "1,2",
                                "--launcher", "none", "-o", str(out)])
    assert made.exit_code == 0, made.output
    data = json.loads(out.read_text())
    assert data["training"]["context_parallel"] == [1, 2]
    assert {p.get("cp", 1) for p in data["workload"]["layers"][1]["profiles"]} == {1, 2}
    bad = runner.invoke(main, ["instance", "new", "--model", "llama3-70b", "--devices", "16",
                               "--network", "dgx-h100-superpod", "--seq-len", "8190",
                               "--context-parallel", "2", "-o", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2
    assert "training.context_parallel" in bad.output


def test_ep_collectives_scale_with_tokens():
    """MoE: the EP all-to-alls carry the routed copies of b·s/c tokens."""
    mixtral = MODELS["mixtral-8x7b"]
    one, two = IntraConfig(ep=2), IntraConfig(ep=2, cp=2)
    workload = profile_workload(mixtral, DEVICE, 4096, (1,), (one, two))
    whole, half = workload.layers[1].profile(one, 1), workload.layers[1].profile(two, 1)
    ep = [c.volume_bytes for c in whole.collectives if c.group is CollectiveGroup.EP]
    assert ep and [2 * c.volume_bytes for c in half.collectives
                   if c.group is CollectiveGroup.EP] == ep
