"""Tests of the analytic transformer profiler (nest_cp.profiles.profiler)."""

from __future__ import annotations

import dataclasses

import pytest

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import CollectiveGroup, CollectiveKind, IntraConfig, Phase
from nest_cp.profiles.presets import DEVICES, MODELS
from nest_cp.profiles.profiler import AttentionKind, ProfileOptions, profile_workload, total_params

DEVICE = DEVICES["h100-sxm"]
DENSE = IntraConfig()
MATERIALIZED = ProfileOptions(attention=AttentionKind.MATERIALIZED)


def _workload(model: str, configs=(DENSE,), microbatches=(1,), seq_len=None):
    spec = MODELS[model]
    return profile_workload(spec, DEVICE, seq_len or spec.default_seq_len, microbatches, configs)


def _block(model: str, config=DENSE, microbatch=1, seq_len=None):
    workload = _workload(model, (config,), (microbatch,), seq_len)
    return workload.layers[1].profile(config, microbatch)


@pytest.mark.parametrize(("model", "expected", "tolerance"), [
    ("llama2-7b", 6.74e9, 0.01),
    ("gpt3-175b", 175e9, 0.01),
    ("mixtral-8x7b", 46.7e9, 0.01),
    ("llama3-70b", 70.6e9, 0.01),
    ("bert-large", 336e6, 0.03),
])
def test_parameter_count_matches_published_size(model, expected, tolerance):
    """Dense plus all expert parameters over the chain at tp = ep = 1 match the published size."""
    assert abs(total_params(_workload(model)) - expected) <= tolerance * expected


def test_chain_is_embedding_blocks_head():
    """The chain holds one embedding, num_layers blocks and one head, in that order."""
    workload = _workload("llama2-7b")
    names = [layer.name for layer in workload.layers]
    assert names[0] == "embedding" and names[-1] == "head"
    assert names[1:-1] == [f"block.{i}" for i in range(MODELS["llama2-7b"].num_layers)]


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_activation_memory_is_korthikanti_table2_tensor_parallel(tp):
    """A GPT-style block (dropout, GeLU, f = 4h, MHA) keeps exactly s*b*h*(10 + 24/t + 5as/(ht))."""
    spec = MODELS["gpt3-175b"]
    seq, batch = 2048, 2
    workload = profile_workload(spec, DEVICE, seq, (batch,), (IntraConfig(tp),), MATERIALIZED)
    block = workload.layers[1].profile(IntraConfig(tp), batch)
    sbh = seq * batch * spec.hidden
    expected = 10 * sbh + (24 * sbh + 5 * spec.num_heads * seq * seq * batch) // tp
    assert block.act_bytes == expected


def test_model_flops_match_narayanan_formula():
    """3 x GPT-3 forward FLOPs equal 72slh^2(1 + s/(6h) + V/(12hl)) (Narayanan et al. 2021)."""
    spec = MODELS["gpt3-175b"]
    seq, layers, hidden = 2048, spec.num_layers, spec.hidden
    vocab = spec.vocab_shard(1)  # the padded vocabulary the LM head computes (50,304)
    workload = _workload("gpt3-175b", seq_len=seq)
    flops = 3 * sum(layer.profile(DENSE, 1).flops for layer in workload.layers)
    # Integer form of 72*s*l*h^2*(1 + s/(6h) + V/(12hl)).
    expected = 72 * seq * layers * hidden**2 + 12 * seq * seq * layers * hidden \
        + 6 * seq * hidden * vocab
    assert flops == expected


def test_tensor_parallelism_halves_block_parameters():
    """With t = 2 a block holds about half its parameters (norms and some biases replicate)."""
    for model in ("llama2-7b", "gpt3-175b", "bert-large"):
        whole = _block(model).params
        half = _block(model, IntraConfig(2)).params
        assert whole / 2 <= half <= 1.01 * whole / 2


def test_forward_time_grows_with_microbatch():
    """A block's fwd and bwd time increase strictly with the microbatch size."""
    workload = _workload("llama2-7b", microbatches=(1, 2, 4))
    profiles = [workload.layers[1].profile(DENSE, b) for b in (1, 2, 4)]
    assert profiles[0].fwd_s < profiles[1].fwd_s < profiles[2].fwd_s
    assert profiles[0].bwd_s < profiles[1].bwd_s < profiles[2].bwd_s


def test_backward_is_priced_per_pass_not_twice_forward():
    """Backward = data + weight gradients, each from its own GEMM shapes: about 2x, never exact."""
    block = _block("llama2-7b")
    assert 1.5 * block.fwd_s < block.bwd_s < 3.5 * block.fwd_s
    assert block.bwd_s != pytest.approx(2 * block.fwd_s, rel=1e-3)
    assert 0 < block.wgrad_s < block.bwd_s


@pytest.mark.parametrize("model", sorted(MODELS))
def test_block_activations_exceed_checkpoint(model):
    """Without recomputation a block keeps more than its 2sbh input checkpoint."""
    spec = MODELS[model]
    block = _block(model)
    assert block.ckpt_bytes == 2 * spec.default_seq_len * spec.hidden
    assert block.act_bytes > block.ckpt_bytes
    assert block.out_bytes == block.ckpt_bytes


def test_tensor_parallel_block_has_four_all_reduces():
    """For t > 1 a block all-reduces 2sbh twice in fwd and twice in bwd; for t = 1 never."""
    spec = MODELS["llama2-7b"]
    assert _block("llama2-7b").collectives == ()
    collectives = _block("llama2-7b", IntraConfig(4)).collectives
    assert len(collectives) == 4
    assert {c.kind for c in collectives} == {CollectiveKind.ALL_REDUCE}
    assert {c.group for c in collectives} == {CollectiveGroup.TP}
    assert sorted(c.phase.value for c in collectives) == ["bwd", "bwd", "fwd", "fwd"]
    assert {c.volume_bytes for c in collectives} == {2 * spec.default_seq_len * spec.hidden}


def test_mixtral_expert_parallelism():
    """Mixtral blocks hold expert parameters split over e and all-to-all over EP when e > 1."""
    spec = MODELS["mixtral-8x7b"]
    alone = _block("mixtral-8x7b")
    sharded = _block("mixtral-8x7b", IntraConfig(1, 4))
    assert alone.expert_params > 0
    assert sharded.expert_params * 4 == alone.expert_params
    assert sharded.dense_params == alone.dense_params
    assert not any(c.kind is CollectiveKind.ALL_TO_ALL for c in alone.collectives)
    all_to_all = [c for c in sharded.collectives if c.kind is CollectiveKind.ALL_TO_ALL]
    assert len(all_to_all) == 4 and {c.group for c in all_to_all} == {CollectiveGroup.EP}
    assert {c.phase for c in all_to_all} == {Phase.FWD, Phase.BWD}
    routed_copy_bytes = 2 * spec.top_k * spec.default_seq_len * spec.hidden
    assert {c.volume_bytes for c in all_to_all} == {routed_copy_bytes}


def test_expert_compute_per_device_does_not_depend_on_ep():
    """Balanced routing gives each device k*s*b token copies, so expert FLOPs ignore e."""
    flops = {ep: _block("mixtral-8x7b", IntraConfig(1, ep)).flops for ep in (1, 2, 8)}
    assert flops[1] == flops[2] == flops[8]


def test_dense_model_has_no_expert_parameters():
    """Dense models put every parameter in dense_params."""
    workload = _workload("gpt3-175b")
    assert all(layer.profile(DENSE, 1).expert_params == 0 for layer in workload.layers)


def test_vocab_parallel_embedding_and_head():
    """With t > 1 the embedding all-reduces in fwd and the head's vocabulary share shrinks."""
    workload = _workload("llama2-7b", configs=(DENSE, IntraConfig(2)))
    embedding, head = workload.layers[0], workload.layers[-1]
    assert embedding.profile(DENSE, 1).collectives == ()
    (reduce,) = embedding.profile(IntraConfig(2), 1).collectives
    assert reduce.kind is CollectiveKind.ALL_REDUCE and reduce.phase is Phase.FWD
    assert head.profile(IntraConfig(2), 1).act_bytes < head.profile(DENSE, 1).act_bytes
    assert head.profile(IntraConfig(2), 1).params < head.profile(DENSE, 1).params


def test_no_dropout_reduces_score_memory():
    """Without dropout the attention scores cost 2*a*s^2*b bytes instead of 5*a*s^2*b."""
    spec = MODELS["gpt3-175b"]
    quiet = dataclasses.replace(spec, dropout=False)
    seq = 1024
    loud = profile_workload(spec, DEVICE, seq, (1,), (DENSE,), MATERIALIZED).layers[1].profile(
        DENSE, 1)
    calm = profile_workload(quiet, DEVICE, seq, (1,), (DENSE,), MATERIALIZED).layers[1].profile(
        DENSE, 1)
    masks = 2 * seq * spec.hidden
    assert loud.act_bytes - calm.act_bytes == 3 * spec.num_heads * seq * seq + masks


def test_vocabulary_is_padded_like_megatron():
    """The word embedding holds V padded to a multiple of 128 * t rows, split over t."""
    spec = MODELS["gpt3-175b"]
    assert spec.vocab_shard(1) == 50304 and spec.vocab_shard(8) * 8 == 51200
    workload = _workload("gpt3-175b", configs=(IntraConfig(8),))
    positions = spec.learned_positions * spec.hidden
    embedding = workload.layers[0].profile(IntraConfig(8), 1)
    assert embedding.dense_params == 6400 * spec.hidden + positions


@pytest.mark.parametrize(("config", "field"), [(IntraConfig(3), "tp"), (IntraConfig(1, 2), "ep")])
def test_incompatible_widths_raise(config, field):
    """A tensor width not dividing the heads, or e > 1 on a dense model, is rejected by field."""
    with pytest.raises(InstanceFormatError) as info:
        _workload("llama2-7b", configs=(config,))
    assert info.value.field == field


def test_sequence_longer_than_learned_positions_raises():
    """BERT-large has 512 learned positions, so a 1,024-token sequence is rejected."""
    with pytest.raises(InstanceFormatError) as info:
        _workload("bert-large", seq_len=1024)
    assert info.value.field == "seq_len"
