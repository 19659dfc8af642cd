#!/bin/sh
# Entrypoint of the sglang-eagle3 image.
#   docker run IMAGE --model-path M ...   -> python3 -m sglang_eagle3.launch --model-path M ...
#   docker run IMAGE                      -> python3 -m sglang_eagle3.launch (the image's CMD)
#   docker run IMAGE python3 -m sglang.launch_server ... | bash | any command -> run unchanged
# Either way through NVIDIA's CUDA entrypoint when the image has it, as SGLang's image does
# (it prints the CUDA banner and runs the driver checks in /opt/nvidia/entrypoint.d).
# exec throughout: the server ends up as PID 1 and gets `docker stop`'s SIGTERM itself.
set -e
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- python3 -m sglang_eagle3.launch "$@"
fi
# Overridable only so the tests can stand in for the base image's entrypoint.
base_entrypoint="${SGLANG_EAGLE3_BASE_ENTRYPOINT:-/opt/nvidia/nvidia_entrypoint.sh}"
if [ -x "$base_entrypoint" ]; then
  exec "$base_entrypoint" "$@"
fi
exec "$@"
