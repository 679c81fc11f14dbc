/*
 * Our declarations of the part of the PJRT C API that Ember uses.
 *
 * Written from the documented layout of openxla/xla xla/pjrt/c/pjrt_c_api.h (ABI major version
 * 0). The ABI rules that make this safe across plugin versions:
 *  - every argument struct starts with `struct_size` and `extension_start`; new fields are only
 *    ever appended; we pass the size of our complete declaration (PJ_SIZE below) and an older
 *    plugin reads only the prefix it knows;
 *  - the function table PJRT_Api only grows at the end: a function is callable only if its slot
 *    lies inside the plugin's api->struct_size (pj_has() in plugin.c checks every call).
 * Field names follow the header so that it can be read side by side with this file.
 */
#ifndef EMBER_PJRT_API_H
#define EMBER_PJRT_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Size of an argument struct as the ABI defines it: up to the end of its last field. Every
 * struct below is complete as of PJ_API_MINOR (a plugin rejects a struct smaller than its own
 * idea of it, and reads no further than the size we pass). */
#define PJ_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
/* Declares `type a` zeroed with its struct_size set. */
#define PJ_ARGS(type, a, last)                                                                     \
    type a;                                                                                        \
    memset(&a, 0, sizeof a);                                                                       \
    a.struct_size = PJ_SIZE(type, last)

#define PJ_API_MAJOR 0
/* The newest minor version whose layout this file follows (for the parts it declares). */
#define PJ_API_MINOR 81

typedef struct PJRT_Extension_Base PJRT_Extension_Base;
typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;

/* ---- version, errors, named values ---- */

typedef struct PJRT_Api_Version {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    int major_version;
    int minor_version;
} PJRT_Api_Version;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Error *error;
} PJRT_Error_Destroy_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const PJRT_Error *error;
    const char *message; /* out, lives as long as the error */
    size_t message_size; /* out */
} PJRT_Error_Message_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const PJRT_Error *error;
    int code; /* out: absl status code */
} PJRT_Error_GetCode_Args;

enum {
    PJ_NV_STRING = 0,
    PJ_NV_INT64 = 1,
    PJ_NV_INT64_LIST = 2,
    PJ_NV_FLOAT = 3,
    PJ_NV_BOOL = 4
};

typedef struct PJRT_NamedValue {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const char *name;
    size_t name_size;
    int type; /* PJ_NV_* (a C enum: int-sized) */
    union {
        const char *string_value;
        int64_t int64_value;
        const int64_t *int64_array_value;
        float float_value;
        bool bool_value;
    };
    size_t value_size; /* elements for strings and lists, 1 for scalars */
} PJRT_NamedValue;

/* ---- plugin ---- */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
} PJRT_Plugin_Initialize_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const PJRT_NamedValue *attributes; /* out, live for the process */
    size_t num_attributes;             /* out */
} PJRT_Plugin_Attributes_Args;

/* ---- events ---- */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Event *event;
} PJRT_Event_Args; /* Destroy, Error and Await share this layout */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Event *event;
    bool is_ready; /* out */
} PJRT_Event_IsReady_Args;

/* ---- client ---- */

/* The key-value store a multi-process client may use (callbacks of PJRT_Client_Create). An error
 * is made by the plugin's callback_error (code: an absl status code, as PJRT_Error_Code). */
typedef PJRT_Error *(*PJRT_CallbackError)(int code, const char *message, size_t message_size);
typedef void (*PJRT_KeyValueGetCallback_ValueDeleter)(char *value);

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const char *key;
    size_t key_size;
    int timeout_in_ms;
    PJRT_CallbackError *callback_error;
    void *user_arg;
    char *value;       /* out */
    size_t value_size; /* out */
    PJRT_KeyValueGetCallback_ValueDeleter value_deleter_callback; /* out */
} PJRT_KeyValueGetCallback_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const char *key;
    size_t key_size;
    const char *value;
    size_t value_size;
    PJRT_CallbackError *callback_error;
    void *user_arg;
} PJRT_KeyValuePutCallback_Args;

typedef PJRT_Error *(*PJRT_KeyValueGetCallback)(PJRT_KeyValueGetCallback_Args *args);
typedef PJRT_Error *(*PJRT_KeyValuePutCallback)(PJRT_KeyValuePutCallback_Args *args);

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const PJRT_NamedValue *create_options;
    size_t num_options;
    PJRT_KeyValueGetCallback kv_get_callback;
    void *kv_get_user_arg;
    PJRT_KeyValuePutCallback kv_put_callback;
    void *kv_put_user_arg;
    PJRT_Client *client; /* out */
    void *kv_try_get_callback;
    void *kv_try_get_user_arg;
} PJRT_Client_Create_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Client *client;
} PJRT_Client_Destroy_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Client *client;
    const char *str;  /* out: platform name / version */
    size_t str_size;  /* out */
} PJRT_Client_String_Args; /* PlatformName and PlatformVersion share this layout */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Client *client;
    PJRT_Device *const *devices; /* out */
    size_t num_devices;          /* out */
} PJRT_Client_Devices_Args; /* Devices and AddressableDevices share this layout */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    char *code;
    size_t code_size;
    const char *format;
    size_t format_size;
} PJRT_Program;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Client *client;
    const PJRT_Program *program;
    const char *compile_options; /* serialized CompileOptionsProto */
    size_t compile_options_size;
    PJRT_LoadedExecutable *executable; /* out */
} PJRT_Client_Compile_Args;

/* PJRT_Buffer_Type values (the ones Ember's dtypes map to). */
enum {
    PJ_PRED = 1,
    PJ_S8 = 2,
    PJ_S16 = 3,
    PJ_S32 = 4,
    PJ_S64 = 5,
    PJ_U8 = 6,
    PJ_F16 = 10,
    PJ_F32 = 11,
    PJ_F64 = 12,
    PJ_BF16 = 13
};

enum { PJ_HOST_IMMUTABLE_ONLY_DURING_CALL = 0, PJ_HOST_IMMUTABLE_UNTIL_TRANSFER_COMPLETES = 1 };

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Client *client;
    const void *data;
    int type; /* PJ_F32, ... */
    const int64_t *dims;
    size_t num_dims;
    const int64_t *byte_strides; /* NULL: dense row-major */
    size_t num_byte_strides;
    int host_buffer_semantics;
    PJRT_Device *device;
    PJRT_Memory *memory;
    void *device_layout;
    PJRT_Event *done_with_host_buffer; /* out */
    PJRT_Buffer *buffer;               /* out */
} PJRT_Client_BufferFromHostBuffer_Args;

/* ---- devices ---- */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Device *device;
    PJRT_DeviceDescription *device_description; /* out */
} PJRT_Device_GetDescription_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_DeviceDescription *device_description;
    int id; /* out */
} PJRT_DeviceDescription_Id_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_DeviceDescription *device_description;
    const char *str; /* out: kind / debug string / to-string */
    size_t str_size; /* out */
} PJRT_DeviceDescription_String_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Device *device;
    int64_t bytes_in_use; /* out */
    int64_t peak_bytes_in_use;
    bool peak_bytes_in_use_is_set;
    int64_t num_allocs;
    bool num_allocs_is_set;
    int64_t largest_alloc_size;
    bool largest_alloc_size_is_set;
    int64_t bytes_limit;
    bool bytes_limit_is_set;
    int64_t bytes_reserved;
    bool bytes_reserved_is_set;
    int64_t peak_bytes_reserved;
    bool peak_bytes_reserved_is_set;
    int64_t bytes_reservable_limit;
    bool bytes_reservable_limit_is_set;
    int64_t largest_free_block_bytes;
    bool largest_free_block_bytes_is_set;
    int64_t pool_bytes;
    bool pool_bytes_is_set;
    int64_t peak_pool_bytes;
    bool peak_pool_bytes_is_set;
} PJRT_Device_MemoryStats_Args;

/* ---- executables ---- */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_LoadedExecutable *executable;
} PJRT_LoadedExecutable_Destroy_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_LoadedExecutable *loaded_executable;
    PJRT_Executable *executable; /* out (to destroy with PJRT_Executable_Destroy) */
} PJRT_LoadedExecutable_GetExecutable_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Executable *executable;
} PJRT_Executable_Destroy_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Executable *executable;
    size_t num_outputs; /* out */
} PJRT_Executable_NumOutputs_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Executable *executable;
    PJRT_Program *program; /* in/out: code NULL asks for code_size, then the caller's buffer */
} PJRT_Executable_OptimizedProgram_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const PJRT_Executable *executable;
    const char *serialized_bytes; /* out */
    size_t serialized_bytes_size; /* out */
    PJRT_SerializedExecutable *serialized_executable; /* out: backs the bytes */
    void (*serialized_executable_deleter)(PJRT_SerializedExecutable *exec); /* out */
} PJRT_Executable_Serialize_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Client *client;
    const char *serialized_executable;
    size_t serialized_executable_size;
    PJRT_LoadedExecutable *loaded_executable; /* out */
    const char *overridden_serialized_compile_options;
    size_t overridden_serialized_compile_options_size;
} PJRT_Executable_DeserializeAndLoad_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    void **send_callbacks;
    void **recv_callbacks;
    size_t num_send_ops;
    size_t num_recv_ops;
    int launch_id;
    const int64_t *non_donatable_input_indices;
    size_t num_non_donatable_input_indices;
    void *context;
    const char *call_location;
    size_t num_tasks;
    int *task_ids;
    int64_t *incarnation_ids;
} PJRT_ExecuteOptions;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_LoadedExecutable *executable;
    PJRT_ExecuteOptions *options;
    PJRT_Buffer *const *const *argument_lists; /* [num_devices][num_args] */
    size_t num_devices;
    size_t num_args;
    PJRT_Buffer **const *output_lists;   /* [num_devices][num_outputs], filled by the plugin */
    PJRT_Event **device_complete_events; /* [num_devices] or NULL */
    PJRT_Device *execute_device;         /* single-device launch of a portable executable */
} PJRT_LoadedExecutable_Execute_Args;

/* ---- buffers ---- */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Buffer *buffer;
} PJRT_Buffer_Destroy_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Buffer *src;
    void *host_layout;
    void *dst;         /* NULL: query the size */
    size_t dst_size;   /* in/out */
    PJRT_Event *event; /* out */
} PJRT_Buffer_ToHostBuffer_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Buffer *buffer;
    PJRT_Device *dst_device;
    PJRT_Buffer *dst_buffer; /* out */
} PJRT_Buffer_CopyToDevice_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Buffer *buffer;
    PJRT_Event *event; /* out */
} PJRT_Buffer_ReadyEvent_Args;

/* ---- topologies and compiling without a client (ahead of time) ---- */

typedef struct PJRT_TopologyDescription PJRT_TopologyDescription;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const char *topology_name; /* e.g. "v6e:2x4" */
    size_t topology_name_size;
    const PJRT_NamedValue *create_options;
    size_t num_options;
    PJRT_TopologyDescription *topology; /* out */
} PJRT_TopologyDescription_Create_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_TopologyDescription *topology;
} PJRT_TopologyDescription_Destroy_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_TopologyDescription *topology;
    const char *str; /* out: platform name / version, lives as long as the topology */
    size_t str_size; /* out */
} PJRT_TopologyDescription_String_Args; /* PlatformName and PlatformVersion share this layout */

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_TopologyDescription *topology;
    PJRT_DeviceDescription *const *descriptions; /* out, live as long as the topology */
    size_t num_descriptions;                     /* out */
} PJRT_TopologyDescription_GetDeviceDescriptions_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_TopologyDescription *topology;
    const PJRT_NamedValue *attributes; /* out, live as long as the topology */
    size_t num_attributes;             /* out */
} PJRT_TopologyDescription_Attributes_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_DeviceDescription *device_description;
    size_t num_attributes;             /* out */
    const PJRT_NamedValue *attributes; /* out */
} PJRT_DeviceDescription_Attributes_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    const PJRT_TopologyDescription *topology;
    const PJRT_Program *program;
    const char *compile_options; /* serialized CompileOptionsProto */
    size_t compile_options_size;
    PJRT_Client *client;         /* optional; NULL for a compile-only device */
    PJRT_Executable *executable; /* out: cannot run, can be analysed and serialized */
} PJRT_Compile_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Executable *executable;
    size_t num_properties;             /* out */
    const PJRT_NamedValue *properties; /* out, live as long as the executable */
} PJRT_Executable_GetCostAnalysis_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Executable *executable;
    /* device memory (HBM on TPU and GPU), bytes */
    int64_t generated_code_size_in_bytes;
    int64_t argument_size_in_bytes;
    int64_t output_size_in_bytes;
    int64_t alias_size_in_bytes; /* argument bytes reused for outputs */
    int64_t temp_size_in_bytes;
    /* host memory, bytes */
    int64_t host_generated_code_size_in_bytes;
    int64_t host_argument_size_in_bytes;
    int64_t host_output_size_in_bytes;
    int64_t host_alias_size_in_bytes;
    int64_t host_temp_size_in_bytes;
    /* device memory at the program's peak (newer plugins insist on this field: libtpu 0.0.51
     * rejects a struct that ends before it) */
    int64_t peak_memory_in_bytes;
} PJRT_Executable_GetCompiledMemoryStats_Args;

typedef struct {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Executable *executable;
    int64_t size_in_bytes; /* out */
} PJRT_Executable_SizeOfGeneratedCodeInBytes_Args;

/* ---- the function table ---- */

typedef PJRT_Error *pj_fn(void *args);
typedef void pj_void_fn(void *args);

/* The table, in the header's order (API 0.81). Every entry is a pointer; a slot past the
 * plugin's struct_size does not exist in that plugin. */
typedef struct PJRT_Api {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Api_Version pjrt_api_version;
    pj_void_fn *PJRT_Error_Destroy;
    pj_void_fn *PJRT_Error_Message;
    pj_fn *PJRT_Error_GetCode;
    pj_fn *PJRT_Plugin_Initialize;
    pj_fn *PJRT_Plugin_Attributes;
    pj_fn *PJRT_Event_Destroy;
    pj_fn *PJRT_Event_IsReady;
    pj_fn *PJRT_Event_Error;
    pj_fn *PJRT_Event_Await;
    pj_fn *PJRT_Event_OnReady;
    pj_fn *PJRT_Client_Create;
    pj_fn *PJRT_Client_Destroy;
    pj_fn *PJRT_Client_PlatformName;
    pj_fn *PJRT_Client_ProcessIndex;
    pj_fn *PJRT_Client_PlatformVersion;
    pj_fn *PJRT_Client_Devices;
    pj_fn *PJRT_Client_AddressableDevices;
    pj_fn *PJRT_Client_LookupDevice;
    pj_fn *PJRT_Client_LookupAddressableDevice;
    pj_fn *PJRT_Client_AddressableMemories;
    pj_fn *PJRT_Client_Compile;
    pj_fn *PJRT_Client_DefaultDeviceAssignment;
    pj_fn *PJRT_Client_BufferFromHostBuffer;
    pj_fn *PJRT_DeviceDescription_Id;
    pj_fn *PJRT_DeviceDescription_ProcessIndex;
    pj_fn *PJRT_DeviceDescription_Attributes;
    pj_fn *PJRT_DeviceDescription_Kind;
    pj_fn *PJRT_DeviceDescription_DebugString;
    pj_fn *PJRT_DeviceDescription_ToString;
    pj_fn *PJRT_Device_GetDescription;
    pj_fn *PJRT_Device_IsAddressable;
    pj_fn *PJRT_Device_LocalHardwareId;
    pj_fn *PJRT_Device_AddressableMemories;
    pj_fn *PJRT_Device_DefaultMemory;
    pj_fn *PJRT_Device_MemoryStats;
    pj_fn *PJRT_Memory_Id;
    pj_fn *PJRT_Memory_Kind;
    pj_fn *PJRT_Memory_DebugString;
    pj_fn *PJRT_Memory_ToString;
    pj_fn *PJRT_Memory_AddressableByDevices;
    pj_fn *PJRT_Executable_Destroy;
    pj_fn *PJRT_Executable_Name;
    pj_fn *PJRT_Executable_NumReplicas;
    pj_fn *PJRT_Executable_NumPartitions;
    pj_fn *PJRT_Executable_NumOutputs;
    pj_fn *PJRT_Executable_SizeOfGeneratedCodeInBytes;
    pj_fn *PJRT_Executable_GetCostAnalysis;
    pj_fn *PJRT_Executable_OutputMemoryKinds;
    pj_fn *PJRT_Executable_OptimizedProgram;
    pj_fn *PJRT_Executable_Serialize;
    pj_fn *PJRT_LoadedExecutable_Destroy;
    pj_fn *PJRT_LoadedExecutable_GetExecutable;
    pj_fn *PJRT_LoadedExecutable_AddressableDevices;
    pj_fn *PJRT_LoadedExecutable_Delete;
    pj_fn *PJRT_LoadedExecutable_IsDeleted;
    pj_fn *PJRT_LoadedExecutable_Execute;
    pj_fn *PJRT_Executable_DeserializeAndLoad;
    pj_fn *PJRT_LoadedExecutable_Fingerprint;
    pj_fn *PJRT_Buffer_Destroy;
    pj_fn *PJRT_Buffer_ElementType;
    pj_fn *PJRT_Buffer_Dimensions;
    pj_fn *PJRT_Buffer_UnpaddedDimensions;
    pj_fn *PJRT_Buffer_DynamicDimensionIndices;
    pj_fn *PJRT_Buffer_GetMemoryLayout;
    pj_fn *PJRT_Buffer_OnDeviceSizeInBytes;
    pj_fn *PJRT_Buffer_Device;
    pj_fn *PJRT_Buffer_Memory;
    pj_fn *PJRT_Buffer_Delete;
    pj_fn *PJRT_Buffer_IsDeleted;
    pj_fn *PJRT_Buffer_CopyToDevice;
    pj_fn *PJRT_Buffer_ToHostBuffer;
    pj_fn *PJRT_Buffer_IsOnCpu;
    pj_fn *PJRT_Buffer_ReadyEvent;
    pj_fn *PJRT_Buffer_UnsafePointer;
    pj_fn *PJRT_Buffer_IncreaseExternalReferenceCount;
    pj_fn *PJRT_Buffer_DecreaseExternalReferenceCount;
    pj_fn *PJRT_Buffer_OpaqueDeviceMemoryDataPointer;
    pj_fn *PJRT_CopyToDeviceStream_Destroy;
    pj_fn *PJRT_CopyToDeviceStream_AddChunk;
    pj_fn *PJRT_CopyToDeviceStream_TotalBytes;
    pj_fn *PJRT_CopyToDeviceStream_GranuleSize;
    pj_fn *PJRT_CopyToDeviceStream_CurrentBytes;
    pj_fn *PJRT_TopologyDescription_Create;
    pj_fn *PJRT_TopologyDescription_Destroy;
    pj_fn *PJRT_TopologyDescription_PlatformName;
    pj_fn *PJRT_TopologyDescription_PlatformVersion;
    pj_fn *PJRT_TopologyDescription_GetDeviceDescriptions;
    pj_fn *PJRT_TopologyDescription_Serialize;
    pj_fn *PJRT_TopologyDescription_Attributes;
    pj_fn *PJRT_Compile;
    pj_fn *PJRT_Executable_OutputElementTypes;
    pj_fn *PJRT_Executable_OutputDimensions;
    pj_fn *PJRT_Buffer_CopyToMemory;
    pj_fn *PJRT_Client_CreateViewOfDeviceBuffer;
    pj_fn *PJRT_Executable_Fingerprint;
    pj_fn *PJRT_Client_TopologyDescription;
    pj_fn *PJRT_Executable_GetCompiledMemoryStats;
    /* later entries are not used by Ember */
} PJRT_Api;

#endif
