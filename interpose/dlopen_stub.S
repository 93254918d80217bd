/* dlopen(path, flags): rewrite a driver name (dlopen_hook.cpp), then tail-jump to libc's dlopen
   with the caller's return address intact. */
  .section .note.GNU-stack,"",@progbits
  .text
  .globl dlopen
  .type dlopen,@function
  .balign 16
dlopen:
  .cfi_startproc
  pushq %rsi                 /* flags; also aligns the stack for the calls */
  .cfi_adjust_cfa_offset 8
  call gcr_dlopen_name       /* %rdi = path -> %rax = path to use */
  pushq %rax
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp              /* keep the stack 16-byte aligned at the call */
  .cfi_adjust_cfa_offset 8
  call gcr_libc_dlopen_address
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  movq %rax, %r11
  popq %rdi
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  testq %r11, %r11
  jz 1f
  jmp *%r11
1:
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlopen, .-dlopen
