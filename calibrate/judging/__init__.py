"""What `servesim calibrate fit` and `import` judge and print: the transfer judged on a GPU its fit never saw, the
import of per-operation tables and LLMServingSim's bundles into a profile that records the judgement, and the carry
rule the shipped carry file was chosen by. The judgements no command runs are in research/judging/, outside the
package."""
