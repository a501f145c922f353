{
  "targets": [
    {
      "target_name": "mup_tstamp",
      "sources": [
        "src/addon.cc",
        "src/packet_socket.cc",
        "src/clocks.cc",
        "src/sys_error.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_CPP_EXCEPTIONS_ALL", "_GNU_SOURCE"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror"]
    }
  ]
}
