/*
 * random-reseed.c — reseed(bytes): mixes bytes into OpenSSL's random
 * generator (Node's crypto.randomBytes) and reseeds it from the kernel.
 * Forks restored from one memory snapshot start with the same generator
 * state: without this, each would hand out the same "random" command ids and
 * temp names. Called by /init with the fork's `entropy`, after the kernel's
 * pool got it (docs/api.md, "Snapshots and forks"). OpenSSL's per-thread
 * generators reseed from the primary one when they see that it was reseeded.
 * The symbols are the Node binary's own (it exports OpenSSL for addons).
 */
#include "random-reseed.h"

int RAND_poll(void);
void RAND_add(const void *buf, int num, double randomness);

/** reseed(bytes: Uint8Array): true once OpenSSL reseeded from the kernel. */
napi_value random_reseed(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1) return NULL;
  void *data;
  size_t length;
  napi_typedarray_type type;
  if (napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL) != napi_ok || type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "reseed takes a Uint8Array");
    return NULL;
  }
  if (length > 0) RAND_add(data, (int)length, (double)length);
  napi_value polled;
  if (napi_get_boolean(env, RAND_poll() == 1, &polled) != napi_ok) return NULL;
  return polled;
}
