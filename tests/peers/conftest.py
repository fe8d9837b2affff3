"""In the vLLM sweep's environment (torchvision without compiled ops that load beside the CPU
torch, peers/sweeps/vllm.txt) the peers' tests run as the sweep does: torchvision's two
import-time ops defined first (conformance/sweeps/vllm_torchvision.py); elsewhere a no-op."""

from posenc.conformance.sweeps import vllm_torchvision

vllm_torchvision.allow_import()
