# Lays out one variant of a kernel package: build/<variant>/<library> and metadata.json with the
# library's sha256. Run as cmake -DLIB=... -DDIR=... -DNAME=... -DVERSION=... -DLICENSE=...
# -DOPS_FILE=... -P package.cmake (ember_kernel_package in ../CMakeLists.txt does).
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
get_filename_component(libname ${LIB} NAME)
file(COPY ${LIB} DESTINATION ${DIR})
file(SHA256 ${DIR}/${libname} sum)
file(READ ${OPS_FILE} ops)
string(STRIP "${ops}" ops)
file(WRITE ${DIR}/metadata.json "{
  \"name\": \"${NAME}\",
  \"version\": ${VERSION},
  \"license\": \"${LICENSE}\",
  \"backend\": \"cpu\",
  \"library\": \"${libname}\",
  \"ops\": ${ops},
  \"files\": {\"${libname}\": \"${sum}\"}
}
")
