"""The native boundary: the only modules that call llama.cpp (through llama-cpp-python and
ctypes). Everything else in localspec talks to models through `engine.backend`'s protocols.

- `backend.LlamaCppBackend`: one GGUF, its context and KV cache (or hybrid/recurrent memory).
- `mtp.LlamaMtpHead`: a target's own nextn (MTP) layers in an MTP context, for `drafters.mtp`.
- `hidden.HiddenStateDraft`: an EAGLE-3/DFlash/DSpark drafter fed with a target's hidden states.
- `ext`: libllama's staging ("ext") symbols those drafters need, resolved by mangled name.
"""
