/* Stand-in for the NVIDIA driver library (libcuda.so.1) on a machine without a GPU: it exists only so that
   SGLang's kernel package (sgl_kernel), whose extension modules link libcuda.so.1, can be imported, which
   SGLang's resolution and front end do on the CUDA code path. The 14 symbols the extensions import, plus a few
   more, are exported; every entry point fails with CUDA_ERROR_NO_DEVICE (100): no GPU work runs through it.
   Built by sglang_deploy/validator_env.py: cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o libcuda.so.1 this.c */
#define STUB(name) int name(void) { return 100; }
STUB(cuPointerGetAttribute) STUB(cuCtxFromGreenCtx) STUB(cuCtxPopCurrent_v2) STUB(cuCtxPushCurrent_v2)
STUB(cuDevResourceGenerateDesc) STUB(cuDevSmResourceSplitByCount) STUB(cuDeviceGetDevResource)
STUB(cuDriverGetVersion) STUB(cuGetErrorString) STUB(cuGetProcAddress_v2) STUB(cuGreenCtxCreate)
STUB(cuGreenCtxDestroy) STUB(cuGreenCtxGetDevResource) STUB(cuStreamCreate) STUB(cuInit)
STUB(cuGetProcAddress) STUB(cuDeviceGetCount) STUB(cuDeviceGet)
