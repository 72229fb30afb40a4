"""What the notebooks show: plotly figures and ipywidgets controls, the live run, exercises, and one module per notebook for its numbers, sentences and figures."""
