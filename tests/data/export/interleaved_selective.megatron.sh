#!/usr/bin/env bash
# Megatron-LM launch for a nest-cp plan (nest-cp export --format megatron).
# plan: tp=1 ep=1 pp=2 vpp=2 dp=2 microbatch=1 zero=1; 4 of 4 devices
# split: 0-0 | 1-1 | 2-2 | 3-3
# targets Megatron-Core core_v0.15.3 (commit 309ffca6a40553362d44fd17efc56b772fa1aa44)
# arguments: NVIDIA/Megatron-LM megatron/training/arguments.py at that release; its startup checks transcribed in nest_cp/model/launchers/megatron.py
# rank order: tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping); 2 torchrun agents on hosts of 2 GPUs (nodeK = devices K*2..K*2+1).
# usage, on the host of each node rank (replace nodeK by the host's name):
#   bash THIS_FILE NODE_RANK MASTER_ADDR TRAINING_SCRIPT [data, tokenizer and optimizer arguments ...]
# warning: the workload does not record which attention kernel its profiles assume (flash or materialized): the launcher uses its default, which may not be what the plan was priced with
# warning: the workload's first layer ('block[0]') is not an embedding: the launcher still builds one on the first stage, which the plan did not price
# warning: the workload's last layer ('block[3]') is not an output head: the launcher still builds one (and the loss) on the last stage, which the plan did not price
# warning: the instance records no model architecture: Megatron needs --hidden-size, --num-attention-heads, --max-position-embeddings and the rest of the model, which the plan's profiles fix but this export cannot name; add the model's arguments yourself, and --bf16/--fp16 is as exported
set -euo pipefail
MEGATRON_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 2
  --num-layers 4
  --seq-length 1
  --micro-batch-size 1
  --global-batch-size 8
  --bf16
  --grad-reduce-in-bf16
  --num-virtual-stages-per-pipeline-rank 2
  --recompute-granularity selective
  --use-distributed-optimizer
  --overlap-grad-reduce
  --use-tp-pp-dp-mapping
)
# node_rank  host      CUDA_VISIBLE_DEVICES  global ranks
# 0          node0     0,1                   0-1
# 1          node1     0,1                   2-3
NODES=(
  "node0 0,1"
  "node1 0,1"
)
NODE_RANK=${1:?node rank}; MASTER_ADDR=${2:?master address}; SCRIPT=${3:?training script}; shift 3
read -r HOST GPUS <<< "${NODES[$NODE_RANK]}"
export CUDA_VISIBLE_DEVICES=$GPUS
NPROC=$(( $(tr -cd , <<< "$GPUS" | wc -c) + 1 ))
echo "node rank $NODE_RANK on $HOST: GPUs $GPUS" >&2
exec torchrun --nnodes "${#NODES[@]}" --node-rank "$NODE_RANK" --nproc-per-node "$NPROC" \
  --master-addr "$MASTER_ADDR" --master-port 6000 "$SCRIPT" "${MEGATRON_ARGS[@]}" "$@"
