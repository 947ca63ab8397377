"""The compiler's view of csrc/trident_runtime.h: the externs generated code calls, and the layout of the structs
it indexes. The header's codes (TAG_*, FLAG_*, EXC_*, SEQ_*, OK, ...) are attributes here too, as trident.abi
reads them from the header.

tests/runtime check the externs and the layout against the header and the built library."""
from __future__ import annotations

from .. import abi as _header
from ..ir.mlir_text import F64, I32, I64, PTR, Extern


def __getattr__(name: str) -> int:
    """A code of the header: abi.TAG_TENSOR is trident.abi.TAG_TENSOR (TRIDENT_TAG_TENSOR)."""
    return getattr(_header, name)


# TridentSpecContext field indices (8-byte fields)
_CTX = _header.struct_fields("TridentSpecContext")
CTX_OPS = _CTX.index("ops")
CTX_CONSTANTS = _CTX.index("constants")

# TridentTensorMeta field indices (8-byte fields): META_DTYPE is the index of field `dtype`
_META = _header.struct_fields("TridentTensorMeta")
META_TYPE_TAG = _META.index("type_tag")
META_DTYPE = _META.index("dtype")
META_DEVICE_TYPE = _META.index("device_type")
META_DEVICE_INDEX = _META.index("device_index")
META_DIM = _META.index("dim")
META_STORAGE_OFFSET = _META.index("storage_offset")
META_DATA_PTR = _META.index("data_ptr")
META_FLAGS = _META.index("flags")
META_SIZES = _META.index("sizes")
META_STRIDES = _META.index("strides")
META_HANDLE = _META.index("handle")
META_FIELDS = len(_META)

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
INSTANCE_DICT = Extern("trident_instance_dict", (PTR,), PTR)
CHECK_OBJECT = Extern("trident_check_object", (PTR, PTR, PTR), I32)
EQUALS = Extern("trident_equals", (PTR, PTR), I32)
STATE_WRITE = Extern("trident_state_write", (PTR, PTR, PTR), I32)
GLOBAL_STATE = Extern("trident_global_state", (), I64)
FUNCTION_MODE_COUNT = Extern("trident_function_mode_count", (), I64)
FUNCTION_MODE_MATCHES = Extern("trident_function_mode_matches", (I64, PTR, PTR), I32)

TENSOR_HANDLE = Extern("trident_tensor_handle", (PTR,), PTR)
TENSOR_SIZE = Extern("trident_tensor_size", (PTR, I64), I64)
TENSOR_STRIDE = Extern("trident_tensor_stride", (PTR, I64), I64)
TENSOR_STORAGE_OFFSET = Extern("trident_tensor_storage_offset", (PTR,), I64)
TENSOR_DATA_ADDRESS = Extern("trident_tensor_data_address", (PTR,), I64)
VALUE_TRUTH = Extern("trident_value_truth", (I32, PTR), I32)
GRAPH_OUTPUT = Extern("trident_graph_output", (I64,), PTR)
OP_CALL = Extern("trident_op_call", (PTR, PTR, I64, PTR, I64), I32)
VIEW_CALL = Extern("trident_view_call", (PTR, PTR, I64, PTR, I64), I32)  # an operator that makes no graph step
FACTORY_CALL = Extern("trident_factory_call", (PTR, PTR, I64, PTR, I64), I32)  # an operator without tensor arguments
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

GUARD_RESULT = I32
RUN_RESULT = I32
