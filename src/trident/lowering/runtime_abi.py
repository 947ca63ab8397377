"""The compiler's view of csrc/trident_runtime.h: the externs generated code calls, tags and offsets.

Keep in sync with the header; tests/runtime check the numbers against the built library."""
from __future__ import annotations

from ..ir.mlir_text import F64, I32, I64, PTR, Extern

# TridentSpecContext field indices (8-byte fields)
CTX_OPS = 0
CTX_CONSTANTS = 1

# TridentTensorMeta field indices (8-byte fields)
META_TYPE_TAG = 0
META_DTYPE = 1
META_DEVICE_TYPE = 2
META_DEVICE_INDEX = 3
META_DIM = 4
META_STORAGE_OFFSET = 5
META_DATA_PTR = 6
META_FLAGS = 7
META_SIZES = 8
META_STRIDES = 9
META_HANDLE = 10
META_FIELDS = 11

FLAG_REQUIRES_GRAD = 1
FLAG_CONJ = 2
FLAG_NEG = 4

TAG_NONE = 0
TAG_TENSOR = 1
TAG_INT = 2
TAG_DOUBLE = 3
TAG_BOOL = 4
TAG_INT_LIST = 5
TAG_TENSOR_LIST = 6
TAG_OPT_TENSOR_LIST = 7
TAG_STRING = 8
TAG_DEVICE = 9

READ_TENSOR = Extern("trident_read_tensor", (PTR, PTR), I32)
READ_INT = Extern("trident_read_int", (PTR, PTR), I32)
READ_FLOAT = Extern("trident_read_float", (PTR, PTR), I32)
READ_BOOL = Extern("trident_read_bool", (PTR, PTR), I32)
IS_NONE = Extern("trident_is_none", (PTR,), I32)
CHECK_SEQUENCE = Extern("trident_check_sequence", (PTR, I64, I64), I32)
SEQUENCE_ITEM = Extern("trident_sequence_item", (PTR, I64), PTR)
INSTANCE_ATTRIBUTE = Extern("trident_instance_attribute", (PTR, PTR), PTR)
DICT_ITEM = Extern("trident_dict_item", (PTR, PTR), PTR)
DICT_KEYS_ARE = Extern("trident_dict_keys_are", (PTR, PTR), I32)
GLOBAL_STATE = Extern("trident_global_state", (), I64)
FUNCTION_MODE_COUNT = Extern("trident_function_mode_count", (), I64)
FUNCTION_MODE_MATCHES = Extern("trident_function_mode_matches", (I64, PTR, PTR), I32)

TENSOR_HANDLE = Extern("trident_tensor_handle", (PTR,), PTR)
TENSOR_SIZE = Extern("trident_tensor_size", (PTR, I64), I64)
TENSOR_STRIDE = Extern("trident_tensor_stride", (PTR, I64), I64)
TENSOR_STORAGE_OFFSET = Extern("trident_tensor_storage_offset", (PTR,), I64)
OP_CALL = Extern("trident_op_call", (PTR, PTR, I64, PTR, I64), I32)
SCALAR_TENSOR = Extern("trident_scalar_tensor", (I64, I64, PTR), I32)
PYTHON_CALL = Extern("trident_python_call", (PTR, PTR, I64), I32)
TRITON_LAUNCH = Extern("trident_triton_launch", (PTR, PTR, I64), I32)
TENSOR_DELETE = Extern("trident_tensor_delete", (PTR,), None)
SET_ERROR = Extern("trident_set_error", (I32, PTR), None)

WRAP_TENSOR = Extern("trident_wrap_tensor", (PTR,), PTR)
NEW_REF = Extern("trident_new_ref", (PTR,), PTR)
BOX_INT = Extern("trident_box_int", (I64,), PTR)
BOX_FLOAT = Extern("trident_box_float", (F64,), PTR)
BOX_BOOL = Extern("trident_box_bool", (I64,), PTR)
SEQUENCE_NEW = Extern("trident_sequence_new", (I64, I64), PTR)
SEQUENCE_SET = Extern("trident_sequence_set", (PTR, I64, PTR), None)
DECREF = Extern("trident_decref", (PTR,), None)

# trident_runtime.h TRIDENT_EXC_* kinds raised by generated code itself
EXC_VALUE = 2  # math domain errors of symbolic floats (symbolic_ints.lower_scalar_op)
EXC_ZERO_DIVISION = 6
EXC_OVERFLOW = 7

GUARD_RESULT = I32
RUN_RESULT = I32
