# The tokenizer's two test programs, which need nothing but the tokenizer: included by this
# directory's CMakeLists.txt, and by the top-level one in K3_PORTABLE_ONLY cross builds (whose
# tests/ tree is not configured), where tests/build/test_extra_build.sh runs the aarch64 ones
# under qemu. The data files are read from ../shared/data next to the repository (never
# copied into it).
set(K3_TOK_DATA ${PROJECT_SOURCE_DIR}/../shared/data)
set(K3_TOK_MODEL ${K3_TOK_DATA}/kimi-tokenizer/tiktoken.model)
set(K3_TOK_CONFIG ${K3_TOK_DATA}/kimi-k3/tokenizer_config.json)
foreach(prog tok_batch test_tokenizer)
  add_executable(${prog} ${CMAKE_CURRENT_LIST_DIR}/${prog}.c)
  k3_target_defaults(${prog})
  target_include_directories(${prog} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${prog} PRIVATE k3_tokenizer)
endforeach()
target_compile_definitions(test_tokenizer PRIVATE K3_TOK_MODEL="${K3_TOK_MODEL}"
                           K3_TOK_CONFIG="${K3_TOK_CONFIG}")
