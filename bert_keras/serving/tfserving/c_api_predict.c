/* Loads a SavedModel through TensorFlow's C API and answers requests on stdin.

   TF_LoadSessionFromSavedModel wraps tensorflow::LoadSavedModel, the loader that
   tensorflow_model_server calls (tensorflow/c/c_api.cc; tensorflow/serving's
   session_bundle_util.cc). bert_keras/serving/c_api_loader.py compiles and drives this program.

   Usage: c_api_predict               answer requests (protocol below)
          c_api_predict --ops LIB...  for each library: str path, str its serialized OpList

   Protocol on stdin/stdout, little-endian; str = u64 length, then the bytes;
   tensor = u32 TF_DataType, u32 rank, i64 dims[rank], then the values
   (TF_STRING: one str each; other types: the raw row-major bytes).
     in:  u32 op library count, str path each (loaded with TF_LoadLibrary first);
          str export dir; u32 tag count, str tag each
     out: u32 TF_Code of the load, str message; if TF_OK, str serialized MetaGraphDef
     then, until stdin ends, one run at a time:
     in:  u32 input count, (str tensor name "op:index", tensor) each;
          u32 output count, str tensor name each
     out: u32 TF_Code, str message; if TF_OK, u32 output count, tensor each
   TensorFlow's own log goes to stderr. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"

static void die(const char *what) {
  fprintf(stderr, "c_api_predict: %s\n", what);
  exit(2);
}

static void *checked_malloc(size_t size) {
  void *memory = malloc(size ? size : 1);
  if (!memory) die("out of memory");
  return memory;
}

static void read_exact(void *buffer, size_t size) {
  if (size && fread(buffer, 1, size, stdin) != size) die("truncated request");
}

static void write_exact(const void *buffer, size_t size) {
  if (size && fwrite(buffer, 1, size, stdout) != size) die("cannot write the response");
}

/* Returns 0 at a clean end of input (before the first byte of a run). */
static int read_u32_or_end(uint32_t *value) {
  size_t got = fread(value, 1, sizeof *value, stdin);
  if (got == 0 && feof(stdin)) return 0;
  if (got != sizeof *value) die("truncated request");
  return 1;
}

static uint32_t read_u32(void) {
  uint32_t value;
  read_exact(&value, sizeof value);
  return value;
}

static void write_u32(uint32_t value) { write_exact(&value, sizeof value); }

static void write_str(const char *data, uint64_t size) {
  write_exact(&size, sizeof size);
  write_exact(data, size);
}

/* A NUL-terminated copy of the next str; *size gets its length. */
static char *read_str(uint64_t *size) {
  uint64_t length;
  read_exact(&length, sizeof length);
  if (length > ((uint64_t)1 << 40)) die("string length out of range");
  char *data = checked_malloc(length + 1);
  read_exact(data, length);
  data[length] = '\0';
  if (size) *size = length;
  return data;
}

static void free_strings(void *data, size_t length, void *count) {
  TF_TString *strings = data;
  for (size_t i = 0; i < (size_t)(uintptr_t)count; ++i) TF_StringDealloc(&strings[i]);
  (void)length;
  free(data);
}

static TF_Tensor *read_tensor(void) {
  TF_DataType type = (TF_DataType)read_u32();
  uint32_t rank = read_u32();
  if (rank > 64) die("tensor rank out of range");
  int64_t dims[64];
  uint64_t count = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    read_exact(&dims[i], sizeof dims[i]);
    if (dims[i] < 0) die("negative tensor dimension");
    count *= (uint64_t)dims[i];
  }
  if (type == TF_STRING) {
    size_t alignment = TF_TensorDefaultAlignment();
    size_t bytes = (count * sizeof(TF_TString) + alignment - 1) / alignment * alignment;
    TF_TString *strings = aligned_alloc(alignment, bytes ? bytes : alignment);
    if (!strings) die("out of memory");
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t size;
      char *data = read_str(&size);
      TF_StringInit(&strings[i]);
      TF_StringCopy(&strings[i], data, size);
      free(data);
    }
    TF_Tensor *tensor = TF_NewTensor(TF_STRING, dims, (int)rank, strings, count * sizeof(TF_TString),
                                     free_strings, (void *)(uintptr_t)count);
    if (!tensor) die("TF_NewTensor refused a string tensor");
    return tensor;
  }
  if (TF_DataTypeSize(type) == 0) die("unsupported input dtype");
  size_t bytes = count * TF_DataTypeSize(type);
  TF_Tensor *tensor = TF_AllocateTensor(type, dims, (int)rank, bytes);
  if (!tensor) die("TF_AllocateTensor failed");
  read_exact(TF_TensorData(tensor), bytes);
  return tensor;
}

static void write_tensor(const TF_Tensor *tensor) {
  TF_DataType type = TF_TensorType(tensor);
  int64_t count = TF_TensorElementCount(tensor);
  write_u32((uint32_t)type);
  write_u32((uint32_t)TF_NumDims(tensor));
  for (int i = 0; i < TF_NumDims(tensor); ++i) {
    int64_t dim = TF_Dim(tensor, i);
    write_exact(&dim, sizeof dim);
  }
  if (type == TF_STRING) {
    const TF_TString *strings = TF_TensorData(tensor);
    for (int64_t i = 0; i < count; ++i)
      write_str(TF_StringGetDataPointer(&strings[i]), TF_StringGetSize(&strings[i]));
  } else {
    write_exact(TF_TensorData(tensor), (size_t)count * TF_DataTypeSize(type));
  }
}

/* "op:index" -> a TF_Output of the graph; its oper is NULL when the op does not exist. */
static TF_Output find_output(TF_Graph *graph, char *name) {
  TF_Output output = {NULL, 0};
  char *colon = strrchr(name, ':');
  if (colon) {
    *colon = '\0';
    output.index = atoi(colon + 1);
  }
  output.oper = TF_GraphOperationByName(graph, name);
  if (colon) *colon = ':';
  return output;
}

/* Reads one str tensor name per port and resolves it; names the first missing one in error. */
static TF_Output *read_ports(TF_Graph *graph, uint32_t count, TF_Tensor **values, char *error,
                             size_t error_size) {
  TF_Output *ports = checked_malloc(count * sizeof *ports);
  for (uint32_t i = 0; i < count; ++i) {
    char *name = read_str(NULL);
    if (values) values[i] = read_tensor();
    ports[i] = find_output(graph, name);
    if (!ports[i].oper && !error[0]) snprintf(error, error_size, "no tensor %s in the graph", name);
    free(name);
  }
  return ports;
}

static void write_status(TF_Code code, const char *message) {
  write_u32(code);
  write_str(message, strlen(message));
}

static void run_one(TF_Session *session, TF_Graph *graph, uint32_t input_count) {
  char error[512] = "";
  TF_Tensor **values = checked_malloc(input_count * sizeof *values);
  TF_Output *inputs = read_ports(graph, input_count, values, error, sizeof error);
  uint32_t output_count = read_u32();
  TF_Output *outputs = read_ports(graph, output_count, NULL, error, sizeof error);
  TF_Tensor **results = calloc(output_count ? output_count : 1, sizeof *results);
  TF_Status *status = TF_NewStatus();
  if (error[0]) {
    write_status(TF_INVALID_ARGUMENT, error);
  } else {
    TF_SessionRun(session, NULL, inputs, values, (int)input_count, outputs, results, (int)output_count,
                  NULL, 0, NULL, status);
    for (uint32_t i = 0; i < output_count && TF_GetCode(status) == TF_OK && !error[0]; ++i) {
      TF_DataType type = TF_TensorType(results[i]);
      if (type != TF_STRING && TF_DataTypeSize(type) == 0)
        snprintf(error, sizeof error, "output %u has dtype %d, which has no fixed size", i, (int)type);
    }
    if (TF_GetCode(status) != TF_OK) {
      write_status(TF_GetCode(status), TF_Message(status));
    } else if (error[0]) {
      write_status(TF_UNIMPLEMENTED, error);
    } else {
      write_status(TF_OK, "");
      write_u32(output_count);
      for (uint32_t i = 0; i < output_count; ++i) write_tensor(results[i]);
    }
  }
  for (uint32_t i = 0; i < input_count; ++i) TF_DeleteTensor(values[i]);
  for (uint32_t i = 0; i < output_count; ++i)
    if (results[i]) TF_DeleteTensor(results[i]);
  TF_DeleteStatus(status);
  free(values);
  free(inputs);
  free(outputs);
  free(results);
  if (fflush(stdout) != 0) die("cannot write the response");
}

/* For each library: str path, str serialized OpList of the ops it registers. */
static int list_ops(int count, char **paths) {
  TF_Status *status = TF_NewStatus();
  for (int i = 0; i < count; ++i) {
    TF_Library *library = TF_LoadLibrary(paths[i], status);
    if (TF_GetCode(status) != TF_OK) {
      fprintf(stderr, "c_api_predict: TF_LoadLibrary(%s): %s\n", paths[i], TF_Message(status));
      return 1;
    }
    TF_Buffer ops = TF_GetOpList(library);
    write_str(paths[i], strlen(paths[i]));
    write_str(ops.data, ops.length);
    TF_DeleteLibraryHandle(library);
  }
  TF_DeleteStatus(status);
  return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--ops") == 0) return list_ops(argc - 2, argv + 2);
  if (argc != 1) die("usage: c_api_predict [--ops LIBRARY...] (requests on stdin)");

  TF_Status *status = TF_NewStatus();
  uint32_t library_count = read_u32();
  for (uint32_t i = 0; i < library_count; ++i) {
    char *path = read_str(NULL);
    TF_Library *library = TF_LoadLibrary(path, status);
    if (TF_GetCode(status) != TF_OK) {
      char message[4096];
      snprintf(message, sizeof message, "TF_LoadLibrary(%s): %s", path, TF_Message(status));
      write_status(TF_GetCode(status), message);
      fflush(stdout);
      return 1;
    }
    TF_DeleteLibraryHandle(library); /* the ops stay registered */
    free(path);
  }
  char *export_dir = read_str(NULL);
  uint32_t tag_count = read_u32();
  char **tags = checked_malloc(tag_count * sizeof *tags);
  for (uint32_t i = 0; i < tag_count; ++i) tags[i] = read_str(NULL);

  TF_SessionOptions *options = TF_NewSessionOptions();
  TF_Graph *graph = TF_NewGraph();
  TF_Buffer *meta_graph = TF_NewBuffer();
  TF_Session *session = TF_LoadSessionFromSavedModel(options, NULL, export_dir, (const char *const *)tags,
                                                     (int)tag_count, graph, meta_graph, status);
  write_status(TF_GetCode(status), TF_Message(status));
  if (TF_GetCode(status) != TF_OK) {
    fflush(stdout);
    return 1;
  }
  write_str(meta_graph->data, meta_graph->length);
  if (fflush(stdout) != 0) die("cannot write the response");
  TF_DeleteBuffer(meta_graph);

  uint32_t input_count;
  while (read_u32_or_end(&input_count)) run_one(session, graph, input_count);

  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteGraph(graph);
  TF_DeleteSessionOptions(options);
  TF_DeleteStatus(status);
  for (uint32_t i = 0; i < tag_count; ++i) free(tags[i]);
  free(tags);
  free(export_dir);
  return 0;
}
