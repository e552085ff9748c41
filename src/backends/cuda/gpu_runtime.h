// The one vendor header of the GPU backends. The CUDA backend uses the CUDA runtime's names as
// they are; compiled by hipcc for AMD GPUs (__HIP_PLATFORM_AMD__), the same sources use HIP,
// whose runtime API mirrors CUDA's name for name. Only the names this backend uses are mapped.
#pragma once

#if defined(__HIP_PLATFORM_AMD__)

#include <hip/hip_runtime_api.h>

/// Name of the vendor, for messages and the plugin name.
#define TM_GPU_VENDOR "hip"
/// True in the HIP build.
#define TM_GPU_IS_HIP 1

#define cudaDeviceProp hipDeviceProp_t
#define cudaError_t hipError_t
#define cudaEvent_t hipEvent_t
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorInitializationError hipErrorNotInitialized
#define cudaErrorIllegalAddress hipErrorIllegalAddress
#define cudaErrorLaunchFailure hipErrorLaunchFailure
#define cudaErrorLaunchTimeout hipErrorLaunchTimeOut
#define cudaErrorECCUncorrectable hipErrorECCNotCorrectable
#define cudaErrorAssert hipErrorAssert
#define cudaErrorHardwareStackError hipErrorIllegalState
#define cudaErrorIllegalInstruction hipErrorIllegalState
#define cudaErrorMisalignedAddress hipErrorIllegalAddress
#define cudaErrorInvalidAddressSpace hipErrorIllegalAddress
#define cudaErrorInvalidPc hipErrorIllegalState
#define cudaErrorUnknown hipErrorUnknown
#define cudaEventDefault hipEventDefault
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaHostAllocDefault hipHostMallocDefault
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDestroy hipEventDestroy
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaFree hipFree
#define cudaFreeHost hipHostFree
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaHostAlloc hipHostMalloc
#define cudaMalloc hipMalloc
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent

#else

#include <cuda_runtime_api.h>

/// Name of the vendor, for messages and the plugin name.
#define TM_GPU_VENDOR "cuda"
/// True in the HIP build.
#define TM_GPU_IS_HIP 0

#endif
