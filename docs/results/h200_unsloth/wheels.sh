#!/usr/bin/env bash
# The wheel folder .whl-unsloth that command.sh beside this installs into its own package
# folder on the GPU machine (Python 3.12, x86-64, torch 2.11+cu130, transformers 5.17, no network):
# Unsloth and unsloth_zoo 2026.10.9, the TRL (<= 1.15) and datasets (< 5) they pin, and what
# their training path imports that the machine lacks. Left out: xformers (optional: Unsloth
# falls back to PyTorch's attention), diffusers, hf_transfer, pydantic (imported only for other
# features, or inside a try). bitsandbytes is required by FastLanguageModel's loader even for
# 16-bit LoRA; its wheel (43 MB, one library per CUDA release) is cut to the CUDA 13 and CPU
# libraries so that the call's files stay under 64 MiB.
#   bash docs/results/h200_unsloth/wheels.sh          (from the repository's root; needs ../shared/gpu-wheels.sh)
set -euo pipefail
dest=.whl-unsloth
bash ../shared/gpu-wheels.sh "$dest" 'unsloth==2026.10.9' 'unsloth_zoo==2026.10.9' 'trl==1.15.*' 'datasets<5' \
  cut_cross_entropy torchao msgspec nest_asyncio tyro docstring-parser typeguard structlog json5 'bitsandbytes==0.50.2'
python3 - "$dest"/bitsandbytes-*.whl <<'EOF'
import os, re, sys, zipfile
path = sys.argv[1]
drop = re.compile(r"bitsandbytes/libbitsandbytes_(cuda(?!13)\d+|rocm\d+|xpu\d+)\.so$")
with zipfile.ZipFile(path) as old:
    items = [(i, old.read(i)) for i in old.infolist() if not drop.search(i.filename)]
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as new:
    for info, data in items:
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(line + b"\n" for line in data.splitlines() if not drop.search(line.split(b",")[0].decode()))
        new.writestr(info, data, zipfile.ZIP_DEFLATED)
os.replace(path + ".tmp", path)
print(path, os.path.getsize(path) // 2**20, "MiB")
EOF
du -sh "$dest"
