# The offline vLLM bundle's tools (build_bundle.sh, stack_env.sh, make_shape_model.py and their
# README) come with the lent GPU machines, not with this repository: GPU_KIT names their folder.
# Sourced by the scripts that build what the H200 gets.

gpu_kit() {  # gpu_kit FILE: FILE's path in the kit, or exit saying what to provide
    if [ -z "${GPU_KIT:-}" ] || [ ! -f "$GPU_KIT/$1" ]; then
        echo "GPU_KIT='${GPU_KIT:-}' has no $1: set GPU_KIT to the folder of the offline vLLM" \
             "bundle's tools (build_bundle.sh, stack_env.sh, make_shape_model.py)" >&2
        exit 2
    fi
    echo "$GPU_KIT/$1"
}
